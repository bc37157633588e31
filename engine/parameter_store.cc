#include "engine/parameter_store.h"

namespace zb {

ParameterStore::ParameterStore(const ParameterLayout& layout, TrackingAllocator& allocator, DType dtype,
                               bool needs_second_moment)
    : layout_(layout), dtype_(dtype) {
  const bool separate_master = has_separate_master(dtype);
  const DType state_dtype = separate_master ? DType::f32 : dtype;
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
  ZB_CHECK(dtype_ == DType::f32 || dtype_ == DType::f64, "initialisation of ", dtype_name(dtype_),
           " weights needs a conversion the CPU backend does not have");
  for (size_t u = 0; u < params_.size(); ++u) {
    const int64_t n = layout_.unit(u).numel;
    std::vector<float> values(n);
    layout_.initialize(u, seed, 0, n, values.data());
    Tensor target = params(u);
    if (dtype_ == DType::f64) {
      std::vector<double> wide(values.begin(), values.end());
      backend.copy(Tensor(wide.data(), Shape{n}, DType::f64, Device::cpu()), target);
    } else {
      backend.copy(Tensor(values.data(), Shape{n}, DType::f32, Device::cpu()), target);
    }
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
