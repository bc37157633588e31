// CudnnAttention: causal attention (bf16 or fp16), within the shape's sliding window where it has one, through
// cuDNN's fused flash-attention graphs, as an alternative to our own flash kernels. The graphs read Q, K and V
// straight out of the fused qkv projection and write the output, the log-sum-exp and the gradients in the same
// layouts as our kernels do (the log-sum-exp is the natural-log one of the scaled, masked scores in both), so
// either direction may run on either implementation. Grouped-query attention computes per-query-head key and
// value gradients in the workspace and sums each group into dqkv.
//
// The graph (matmul, scale, causal mask, softmax with its statistics, matmul; and the backward's 19
// operations) is what cuDNN's fusion engines recognise as flash attention on cuDNN 8.9 through 9.2x; newer
// versions also offer single SDPA operations. A sliding window narrower than the sequence adds its band mask
// after the causal one in either direction, which the engines take from cuDNN 9.2 on; an older cuDNN builds no
// plan for a banded shape (why_unavailable says so). Plans are built once per shape and cached; the forward's
// first run times the first few plans cuDNN's heuristics offer and keeps the fastest (their first is not always
// it).
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "core/dtype.h"
#include "kernels/attention_shape.h"
#include "kernels/timing_summary.h"

struct cudnnContext;

namespace zb::cuda {

class CudnnAttention {
 public:
  CudnnAttention();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Device bytes of workspace the forward (backward) needs for `shape`, or nullopt when cuDNN builds no plan
  // for it (see why_unavailable); the caller then runs its own kernels. The first ask builds the plan.
  std::optional<size_t> forward_workspace(const AttentionShape& shape, DType dtype);
  std::optional<size_t> backward_workspace(const AttentionShape& shape, DType dtype);
  // Why the last shape asked for has no plan ("" when it has one).
  const std::string& why_unavailable() const { return why_; }
  // How the timed choices of forward plans went.
  const TimingSummary& forward_timing() const { return forward_timing_; }

  // As Backend::attention_forward / attention_backward, bf16 or fp16 data (`dtype`), on `stream`; `workspace`
  // holds at least forward_workspace(shape, dtype) (backward_workspace(shape, dtype)) bytes.
  void forward(const void* qkv, const AttentionShape& shape, DType dtype, void* out, float* lse, void* workspace,
               cudaStream_t stream);
  void backward(const void* dout, const void* qkv, const void* out, const float* lse, const AttentionShape& shape,
                DType dtype, void* dqkv, void* workspace, cudaStream_t stream);

 private:
  struct Plans;
  // The shape (its window where it is banded, else 0) and the dtype.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int>;
  Plans& plans_for(const AttentionShape& shape, DType dtype);

  cudnnContext* handle_ = nullptr;
  std::map<Key, std::unique_ptr<Plans>> plans_;
  std::string why_;
  TimingSummary forward_timing_;
};

}  // namespace zb::cuda
