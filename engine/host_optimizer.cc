#include "engine/host_optimizer.h"

#include <cstring>

#include "core/check.h"
#include "offload/cpu_optimizer.h"

namespace zb {

HostOptimizer::HostOptimizer(ParameterStore& store, Backend& backend, TrackingAllocator& host_allocator, uint64_t seed,
                             bool needs_second_moment)
    : store_(store), backend_(backend) {
  const DType dtype = store.dtype();
  ZB_CHECK(dtype == DType::f32 || dtype == DType::bf16, "the CPU optimizer takes fp32 or bf16 models, not ",
           dtype_name(dtype));
  for (size_t u = 0; u < store.unit_count(); ++u) {
    Unit unit;
    unit.n = store.optimizer_grad(u).numel();
    const Shape shape{unit.n};
    unit.master = host_allocator.allocate(shape, DType::f32, MemoryPool::optimizer_state);
    unit.m = host_allocator.allocate(shape, DType::f32, MemoryPool::optimizer_state);
    if (needs_second_moment) unit.v = host_allocator.allocate(shape, DType::f32, MemoryPool::optimizer_state);
    unit.grad = host_allocator.allocate(shape, dtype, MemoryPool::gradients);
    unit.weights = host_allocator.allocate(shape, dtype, MemoryPool::parameters);
    const std::vector<float> initial = initial_unit_values(store.layout(), u, seed, store.optimizer_begin(u), unit.n);
    std::memcpy(unit.master.data(), initial.data(), initial.size() * sizeof(float));
    std::memset(unit.m.data(), 0, unit.m.bytes());
    if (needs_second_moment) std::memset(unit.v.data(), 0, unit.v.bytes());
    units_.push_back(std::move(unit));
  }
}

size_t HostOptimizer::host_bytes(const ParameterStore& store, bool needs_second_moment) {
  size_t total = 0;
  for (size_t u = 0; u < store.unit_count(); ++u) {
    const size_t n = size_t(store.sharded_optimizer() ? store.shard_numel(u) : store.padded_numel(u));
    total += n * ((needs_second_moment ? 12 : 8) + 2 * dtype_size(store.dtype()));
  }
  return total;
}

void HostOptimizer::step(const OptimizerParams& params) {
  const DType dtype = store_.dtype();
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    const Shape shape{unit.n};
    Tensor host_grad = unit.grad.view(shape, dtype);
    backend_.copy(store_.optimizer_grad(u), host_grad);  // returns when the gradient is on the host
    cpu_optimizer_step({static_cast<float*>(unit.master.data()), unit.grad.data(), static_cast<float*>(unit.m.data()),
                        static_cast<float*>(unit.v.data()), unit.weights.data(), unit.n, dtype == DType::f32},
                       params);
    Tensor target = store_.optimizer_params(u);
    backend_.copy(unit.weights.view(shape, dtype), target);
  }
}

}  // namespace zb
