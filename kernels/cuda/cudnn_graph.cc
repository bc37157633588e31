#include "kernels/cuda/cudnn_graph.h"

#include "core/check.h"
#include "core/errors.h"
#include "core/strings.h"

namespace zb::cuda::cudnn {

std::string status_text(cudnnStatus_t status) { return cat(cudnnGetErrorString(status), " (", int(status), ")"); }

void check(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) throw Error(cat(call, " failed: ", status_text(status)));
}

#define ZB_CUDNN_CHECK(call) check((call), #call)

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  ZB_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &descriptor_));
}

Descriptor::~Descriptor() {
  if (descriptor_) cudnnBackendDestroyDescriptor(descriptor_);
}

void Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                     const void* values) {
  const cudnnStatus_t status = cudnnBackendSetAttribute(descriptor_, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS)
    throw Error(cat("cudnnBackendSetAttribute(attribute ", int(name), ") failed: ", status_text(status)));
}

void Descriptor::set(cudnnBackendAttributeName_t name, const Descriptor& other) {
  const cudnnBackendDescriptor_t value = other.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}

void Descriptor::set_int64(cudnnBackendAttributeName_t name, int64_t value) { set(name, CUDNN_TYPE_INT64, 1, &value); }

cudnnStatus_t Descriptor::finalize() { return cudnnBackendFinalize(descriptor_); }

Dims packed_strides(const Dims& dims) {
  Dims strides{};
  int64_t stride = 1;
  for (int i = 3; i >= 0; --i) {
    strides[i] = stride;
    stride *= dims[i];
  }
  return strides;
}

void Plan::execute(cudnnHandle_t handle, const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
                   void* workspace) const {
  ZB_CHECK(uids.size() == pointers.size(), "a cuDNN variant pack binds one pointer per tensor id");
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(pointers.size()), pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  ZB_CUDNN_CHECK(pack.finalize());
  ZB_CUDNN_CHECK(cudnnBackendExecute(handle, plan_->get(), pack.get()));
}

Graph::Tensor Graph::tensor(const TensorSpec& spec) {
  Descriptor& d = owned_.emplace_back(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &spec.dtype);
  d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, spec.dims.data());
  d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, spec.strides.data());
  const bool is_virtual = spec.uid == 0;
  d.set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, is_virtual ? next_virtual_uid_++ : spec.uid);
  d.set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
  d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (spec.by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &spec.by_value);
  ZB_CUDNN_CHECK(d.finalize());
  return &d;
}

Graph::Tensor Graph::intermediate(const Dims& dims, cudnnDataType_t dtype) {
  return tensor({dims, packed_strides(dims), dtype, 0, false});
}

void Graph::matmul(Tensor a, Tensor b, Tensor c) {
  Descriptor& desc = owned_.emplace_back(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  desc.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  ZB_CUDNN_CHECK(desc.finalize());
  Descriptor& op = owned_.emplace_back(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, *a);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, *b);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, *c);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_DESC, desc);
  ZB_CUDNN_CHECK(op.finalize());
  operations_.push_back(&op);
}

void Graph::pointwise(cudnnPointwiseMode_t mode, Tensor x, Tensor y, Tensor b, Tensor t,
                      cudnnDataType_t math_precision, std::optional<int64_t> axis) {
  Descriptor& desc = owned_.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  desc.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  desc.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math_precision);
  if (axis) desc.set_int64(CUDNN_ATTR_POINTWISE_AXIS, *axis);
  ZB_CUDNN_CHECK(desc.finalize());
  Descriptor& op = owned_.emplace_back(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, *x);
  if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  if (t) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, *y);
  const float one = 1.0f;
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  ZB_CUDNN_CHECK(op.finalize());
  operations_.push_back(&op);
}

void Graph::reduction(cudnnReduceTensorOp_t reduce, Tensor x, Tensor y) {
  Descriptor& desc = owned_.emplace_back(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  desc.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  desc.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
  ZB_CUDNN_CHECK(desc.finalize());
  Descriptor& op = owned_.emplace_back(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, *x);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, *y);
  ZB_CUDNN_CHECK(op.finalize());
  operations_.push_back(&op);
}

void Graph::reshape(Tensor x, Tensor y) {
  Descriptor& op = owned_.emplace_back(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, *x);
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, *y);
  ZB_CUDNN_CHECK(op.finalize());
  operations_.push_back(&op);
}

// The operation graph and execution plan still take the handle on the cuDNN versions we run on (9.x), though
// newer headers mark the attribute deprecated in favour of a device-property descriptor.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
std::vector<Plan> Graph::build(cudnnHandle_t handle, std::string* why, size_t most) {
  auto fail = [&](const std::string& reason) -> std::vector<Plan> {
    if (why) *why = reason;
    return {};
  };
  Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Descriptor* op : operations_) ops.push_back(op->get());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  if (const cudnnStatus_t s = graph.finalize(); s != CUDNN_STATUS_SUCCESS)
    return fail(cat("the operation graph: ", status_text(s)));

  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (const cudnnStatus_t s = heuristics.finalize(); s != CUDNN_STATUS_SUCCESS)
    return fail(cat("the heuristics: ", status_text(s)));
  int64_t available = 0;
  ZB_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, nullptr));
  if (available == 0) return fail("cuDNN's heuristics offer no engine for the graph");
  std::vector<std::unique_ptr<Descriptor>> configs;
  std::vector<cudnnBackendDescriptor_t> config_handles;
  for (int64_t i = 0; i < available; ++i) {
    configs.push_back(std::make_unique<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    config_handles.push_back(configs.back()->get());
  }
  int64_t returned = 0;
  ZB_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &returned,
                                          config_handles.data()));
  std::string last_failure = "none of the engine configurations built";
  std::vector<Plan> plans;
  for (int64_t i = 0; i < returned && plans.size() < most; ++i) {
    auto plan = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *configs[i]);
    if (const cudnnStatus_t s = plan->finalize(); s != CUDNN_STATUS_SUCCESS) {
      last_failure = cat("engine configuration ", i, ": ", status_text(s));
      continue;
    }
    int64_t workspace = 0;
    int64_t count = 0;
    ZB_CUDNN_CHECK(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                            1, &count, &workspace));
    plans.emplace_back(std::move(plan), workspace);
  }
  return plans.empty() ? fail(last_failure) : std::move(plans);
}
#pragma GCC diagnostic pop

}  // namespace zb::cuda::cudnn
