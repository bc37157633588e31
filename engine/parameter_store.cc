#include "engine/parameter_store.h"

namespace zb {

ParameterStore::ParameterStore(const ParameterLayout& layout, TrackingAllocator& allocator, DType dtype,
                               bool needs_second_moment)
    : layout_(layout), dtype_(dtype) {
  const bool separate_master = has_separate_master(dtype);
  const DType state_dtype = master_dtype(dtype);
  for (const ParameterUnit& unit : layout.units()) {
    const Shape flat{unit.numel};
    params_.push_back(allocator.allocate(flat, dtype, MemoryPool::parameters));
    grads_.push_back(allocator.allocate(flat, dtype, MemoryPool::gradients));
    if (separate_master) master_.push_back(allocator.allocate(flat, DType::f32, MemoryPool::optimizer_state));
    m_.push_back(allocator.allocate(flat, state_dtype, MemoryPool::optimizer_state));
    if (needs_second_moment) v_.push_back(allocator.allocate(flat, state_dtype, MemoryPool::optimizer_state));
  }
}

void ParameterStore::initialize(Backend& backend, uint64_t seed) {
  for (size_t u = 0; u < params_.size(); ++u) {
    // The values are drawn in fp32 on the host, then land in the master weights (converted on the host for
    // the CPU backend's fp64 mode) and, in 16-bit training, are converted on the device into the model copy.
    const int64_t n = layout_.unit(u).numel;
    std::vector<float> values(n);
    layout_.initialize(u, seed, 0, n, values.data());
    const Tensor host(values.data(), Shape{n}, DType::f32, Device::cpu());
    Tensor target = master(u);
    if (target.dtype == DType::f32) {
      backend.copy(host, target);
    } else {
      backend.convert(host, target);
    }
    Tensor model = model_copy(u);
    if (!model.empty()) backend.convert(target, model);
    Tensor m = first_moment(u), v = second_moment(u);
    backend.fill_zero(m);
    if (!v.empty()) backend.fill_zero(v);
  }
  zero_gradients(backend);
}

void ParameterStore::zero_gradients(Backend& backend) {
  for (size_t u = 0; u < grads_.size(); ++u) {
    Tensor g = grads(u);
    backend.fill_zero(g);
  }
}

std::vector<Tensor> ParameterStore::all_params() const {
  std::vector<Tensor> out;
  for (size_t u = 0; u < params_.size(); ++u) out.push_back(params(u));
  return out;
}

std::vector<Tensor> ParameterStore::all_grads() const {
  std::vector<Tensor> out;
  for (size_t u = 0; u < grads_.size(); ++u) out.push_back(grads(u));
  return out;
}

}  // namespace zb
