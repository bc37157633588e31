#include "engine/parameter_store.h"

#include <algorithm>

#include "core/check.h"

namespace zb {

int64_t ParameterStore::padded_numel(int64_t numel, int world) {
  const int64_t granule = int64_t(world) * kShardAlignment;
  return (numel + granule - 1) / granule * granule;
}

ParameterStore::ParameterStore(const ParameterLayout& layout, TrackingAllocator& allocator, DType dtype,
                               bool needs_second_moment, ShardGeometry geometry)
    : layout_(layout), allocator_(allocator), dtype_(dtype), geometry_(geometry) {
  ZB_CHECK(geometry.stage >= 0 && geometry.stage <= 3, "ZeRO stage ", geometry.stage);
  ZB_CHECK(geometry.world >= 1 && geometry.rank >= 0 && geometry.rank < geometry.world, "rank ", geometry.rank,
           " of ", geometry.world);
  const DType state_dtype = master_dtype(dtype);
  for (const ParameterUnit& pu : layout.units()) {
    Unit unit;
    unit.padded = padded_numel(pu.numel, geometry.world);
    const int64_t shard = unit.padded / geometry.world;
    unit.whole_params = geometry.stage < 3 || pu.numel < geometry.persistence_threshold;
    const int64_t state = geometry.stage >= 1 ? shard : unit.padded;
    unit.params = allocator.allocate(Shape{unit.whole_params ? unit.padded : shard}, dtype, MemoryPool::parameters);
    unit.grads = allocator.allocate(Shape{geometry.stage < 2 ? unit.padded : shard}, dtype, MemoryPool::gradients);
    if (has_separate_master(dtype)) unit.master = allocator.allocate(Shape{state}, DType::f32, MemoryPool::optimizer_state);
    unit.m = allocator.allocate(Shape{state}, state_dtype, MemoryPool::optimizer_state);
    if (needs_second_moment) unit.v = allocator.allocate(Shape{state}, state_dtype, MemoryPool::optimizer_state);
    units_.push_back(std::move(unit));
  }
}

Tensor ParameterStore::params(size_t u) const {
  ZB_CHECK(units_[u].whole_params, "unit ", layout_.unit(u).name, " is held as a shard only");
  return units_[u].params.view(Shape{units_[u].padded}, dtype_);
}

Tensor ParameterStore::grads(size_t u) const {
  ZB_CHECK(whole_grads(), "stage ", geometry_.stage, " holds gradient shards only");
  return units_[u].grads.view(Shape{units_[u].padded}, dtype_);
}

Tensor ParameterStore::param_shard(size_t u) const {
  const int64_t n = shard_numel(u);
  if (units_[u].whole_params) return params(u).flat_slice(shard_begin(u), shard_begin(u) + n);
  return units_[u].params.view(Shape{n}, dtype_);
}

Tensor ParameterStore::grad_shard(size_t u) const {
  const int64_t n = shard_numel(u);
  if (whole_grads()) return grads(u).flat_slice(shard_begin(u), shard_begin(u) + n);
  return units_[u].grads.view(Shape{n}, dtype_);
}

Tensor ParameterStore::master(size_t u) const {
  return units_[u].master.bytes() ? state_view(units_[u].master, u) : optimizer_params(u);
}

Tensor ParameterStore::model_copy(size_t u) const {
  return units_[u].master.bytes() ? optimizer_params(u) : Tensor{};
}

Tensor ParameterStore::state_view(const Buffer& b, size_t u) const {
  return b.view(Shape{sharded_optimizer() ? shard_numel(u) : units_[u].padded}, master_dtype(dtype_));
}

void ParameterStore::initialize(Backend& backend, uint64_t seed) {
  for (size_t u = 0; u < units_.size(); ++u) {
    // Values are drawn in fp32 on the host for the range each buffer covers (any range gives the values the
    // whole unit holds there; padding is zero), then copied or converted on the device.
    const int64_t numel = layout_.unit(u).numel;
    auto host_values = [&](int64_t begin, int64_t count) {
      std::vector<float> values(count, 0.0f);
      const int64_t end = std::min(begin + count, numel);
      if (end > begin) layout_.initialize(u, seed, begin, end, values.data());
      return values;
    };
    auto fill = [&](Tensor target, int64_t begin) {
      std::vector<float> values = host_values(begin, target.numel());
      const Tensor host(values.data(), target.shape, DType::f32, Device::cpu());
      if (target.dtype == DType::f32) return backend.copy(host, target);
      // Other dtypes: through fp32 on the backend's device, converted there.
      Buffer staging = allocator_.allocate(target.shape, DType::f32, MemoryPool::workspace);
      Tensor staged = staging.view(target.shape, DType::f32);
      backend.copy(host, staged);
      backend.convert(staged, target);
      backend.synchronize();  // the staging buffer is freed when this returns
    };
    const int64_t state_begin = sharded_optimizer() ? shard_begin(u) : 0;
    fill(master(u), state_begin);
    // The model-dtype weights: whole where held whole (every rank the same values), else the shard; both
    // from the same fp32 values as the master, so the two agree.
    if (units_[u].master.bytes()) {
      if (units_[u].whole_params) {
        fill(params(u), 0);
      } else {
        fill(param_shard(u), shard_begin(u));
      }
    } else if (units_[u].whole_params && sharded_optimizer()) {
      fill(params(u), 0);  // fp32: the master was the shard slice; the rest of the whole unit too
    }
    Tensor m = first_moment(u), v = second_moment(u);
    backend.fill_zero(m);
    if (!v.empty()) backend.fill_zero(v);
  }
  zero_gradients(backend);
}

void ParameterStore::zero_gradients(Backend& backend) {
  for (size_t u = 0; u < units_.size(); ++u) {
    Tensor g = whole_grads() ? grads(u) : grad_shard(u);
    backend.fill_zero(g);
  }
}

std::vector<Tensor> ParameterStore::all_params() const {
  std::vector<Tensor> out;
  for (size_t u = 0; u < units_.size(); ++u) out.push_back(params(u));
  return out;
}

std::vector<Tensor> ParameterStore::all_grads() const {
  std::vector<Tensor> out;
  for (size_t u = 0; u < units_.size(); ++u) out.push_back(grads(u));
  return out;
}

}  // namespace zb
