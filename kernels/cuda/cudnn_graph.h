// A thin layer over cuDNN's backend (graph) API: tensors, the matmul, pointwise, reduction and reshape
// operations a fused attention graph is made of, and the execution plan cuDNN's heuristics pick for it.
// The descriptors are RAII objects; a Graph owns every descriptor it creates, so operations may refer to
// tensors by pointer until the plan is built.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zb::cuda::cudnn {

// The text of a failed cuDNN call, for errors.
std::string status_text(cudnnStatus_t status);
// Throws Error naming the call when status is not success.
void check(cudnnStatus_t status, const char* call);

// One backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return descriptor_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  void set(cudnnBackendAttributeName_t name, const Descriptor& other);
  void set_int64(cudnnBackendAttributeName_t name, int64_t value);
  // Returns the status instead of throwing: a graph cuDNN has no engine for fails here.
  cudnnStatus_t finalize();

 private:
  cudnnBackendDescriptor_t descriptor_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

// A 4-D tensor of the graph. Real tensors have a unique id the variant pack binds a pointer to; virtual ones
// live only inside the fused kernel; by-value ones are scalars passed from the host at execution.
struct TensorSpec {
  Dims dims{}, strides{};
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  int64_t uid = 0;  // 0: virtual
  bool by_value = false;
};

// Strides of a packed tensor of `dims` (the last dimension contiguous).
Dims packed_strides(const Dims& dims);

// A built plan: what to execute and how much workspace it needs.
class Plan {
 public:
  Plan(std::unique_ptr<Descriptor> plan, int64_t workspace_bytes)
      : plan_(std::move(plan)), workspace_bytes_(workspace_bytes) {}
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // Runs the plan on the handle's stream with pointers[i] bound to uids[i] (host pointers for by-value
  // tensors, read before this returns).
  void execute(cudnnHandle_t handle, const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
               void* workspace) const;

 private:
  std::unique_ptr<Descriptor> plan_;
  int64_t workspace_bytes_ = 0;
};

class Graph {
 public:
  using Tensor = const Descriptor*;

  Tensor tensor(const TensorSpec& spec);
  // A virtual fp32 tensor (or of `dtype`) of the given dims, packed.
  Tensor intermediate(const Dims& dims, cudnnDataType_t dtype = CUDNN_DATA_FLOAT);

  void matmul(Tensor a, Tensor b, Tensor c);
  // y = mode(x) or mode(x, b); for BINARY_SELECT, y = t ? x : b. GEN_INDEX takes `axis`.
  void pointwise(cudnnPointwiseMode_t mode, Tensor x, Tensor y, Tensor b = nullptr, Tensor t = nullptr,
                 cudnnDataType_t math_precision = CUDNN_DATA_FLOAT, std::optional<int64_t> axis = std::nullopt);
  // y = x reduced (max or sum) over the dimensions where y has extent 1.
  void reduction(cudnnReduceTensorOp_t op, Tensor x, Tensor y);
  void reshape(Tensor x, Tensor y);

  // The plans of the first `most` engine configurations cuDNN's heuristics offer that build, in the
  // heuristics' order of preference; empty (with the reason in *why) when none does.
  std::vector<Plan> build(cudnnHandle_t handle, std::string* why, size_t most = 1);

 private:
  std::deque<Descriptor> owned_;  // stable addresses for the Tensor handles
  std::vector<const Descriptor*> operations_;
  int64_t next_virtual_uid_ = int64_t(1) << 40;  // far from the caller's ids
};

}  // namespace zb::cuda::cudnn
