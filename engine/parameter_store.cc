#include "engine/parameter_store.h"

#include <algorithm>
#include <thread>

#include "core/sixteen_bit.h"
#include "kernels/blockwise_quantization.h"
#include "core/check.h"

namespace zb {

int64_t ParameterStore::padded_numel(int64_t numel, const ShardGeometry& geometry) {
  const int64_t granule = int64_t(geometry.world) * geometry.alignment;
  return (numel + granule - 1) / granule * granule;
}

std::vector<bool> ParameterStore::host_optimizer_units(const ParameterLayout& layout, const ShardGeometry& geometry) {
  const size_t count = layout.units().size();
  std::vector<bool> on_host(count, geometry.optimizer_on_host);
  for (size_t u = 0; u < count; ++u) on_host[u] = on_host[u] && layout.unit(u).trainable;
  if (!geometry.optimizer_on_host || geometry.offload_ratio >= 1) return on_host;
  double total = 0;
  for (const ParameterUnit& unit : layout.units())
    if (unit.trainable) total += double(padded_numel(unit.numel, geometry));
  const double device_share = (1.0 - geometry.offload_ratio) * total;
  double kept = 0;
  for (size_t u = 0; u < count; ++u) {  // in forward order
    if (!layout.unit(u).trainable) continue;
    const double n = double(padded_numel(layout.unit(u).numel, geometry));
    if (kept + n > device_share) continue;  // (a large embedding need not leave the blocks on the host)
    kept += n;
    on_host[u] = false;
  }
  return on_host;
}

double ParameterStore::host_optimizer_share(const ParameterLayout& layout, const ShardGeometry& geometry) {
  const std::vector<bool> on_host = host_optimizer_units(layout, geometry);
  double host = 0, total = 0;
  for (size_t u = 0; u < on_host.size(); ++u) {
    if (!layout.unit(u).trainable) continue;
    const double n = double(padded_numel(layout.unit(u).numel, geometry));
    total += n;
    if (on_host[u]) host += n;
  }
  return total > 0 ? host / total : 0.0;
}

ParameterStore::ParameterStore(const ParameterLayout& layout, TrackingAllocator& allocator, DType dtype,
                               OptimizerStateFormat state, ShardGeometry geometry, TrackingAllocator* host_allocator)
    : layout_(layout), allocator_(allocator), dtype_(dtype), state_(state), geometry_(geometry) {
  ZB_CHECK(!geometry.params_on_host || host_allocator != nullptr, "weights on the host need a host allocator");
  ZB_CHECK(!geometry.params_on_host || geometry.optimizer_on_host, "weights on the host need the optimizer there");
  TrackingAllocator& params_allocator = geometry.params_on_host ? *host_allocator : allocator;
  ZB_CHECK(geometry.offload_ratio > 0 && geometry.offload_ratio <= 1, "offload ratio ", geometry.offload_ratio);
  ZB_CHECK(!geometry.params_on_host || geometry.offload_ratio == 1, "weights on the host need all the optimizer there");
  ZB_CHECK(geometry.stage >= 0 && geometry.stage <= 3, "ZeRO stage ", geometry.stage);
  ZB_CHECK(geometry.alignment > 0 && geometry.alignment % kShardAlignment == 0 &&
               (!state.quantized || geometry.alignment % kQuantizationBlock == 0),
           "shard alignment ", geometry.alignment);
  ZB_CHECK(!state.quantized || state.second_moment, "8-bit moments are Adam's");
  ZB_CHECK(geometry.world >= 1 && geometry.rank >= 0 && geometry.rank < geometry.world, "rank ", geometry.rank, " of ",
           geometry.world);
  const DType state_dtype = master_dtype(dtype);
  const std::vector<bool> on_host = host_optimizer_units(layout, geometry);
  for (const ParameterUnit& pu : layout.units()) {
    Unit unit;
    unit.optimizer_on_host = on_host[units_.size()];
    unit.padded = padded_numel(pu.numel, geometry);
    const int64_t shard = unit.padded / geometry.world;
    unit.whole_params = geometry.stage < 3 || pu.numel < geometry.persistence_threshold;
    // Weights on the host are only what this rank's optimizer updates: whole in stage 0, else its shard,
    // which the other ranks' shards join on the device (gathered there, as stage 3 does).
    if (geometry.params_on_host) unit.whole_params = geometry.stage == 0;
    const int64_t range = optimizer_numel(unit.padded, geometry);
    unit.params =
        params_allocator.allocate(Shape{unit.whole_params ? unit.padded : shard}, dtype, MemoryPool::parameters);
    if (!pu.trainable) {  // weights only
      units_.push_back(std::move(unit));
      continue;
    }
    unit.grads = allocator.allocate(Shape{geometry.stage < 2 ? unit.padded : shard}, dtype, MemoryPool::gradients);
    if (!unit.optimizer_on_host) {
      if (has_separate_master(dtype))
        unit.master = allocator.allocate(Shape{range}, DType::f32, MemoryPool::optimizer_state);
      unit.moments = allocator.allocate(state_.moment_bytes(range, state_dtype), MemoryPool::optimizer_state);
    }
    units_.push_back(std::move(unit));
  }
}

Tensor ParameterStore::params(size_t u) const {
  ZB_CHECK(units_[u].whole_params, "unit ", layout_.unit(u).name, " is held as a shard only");
  return units_[u].params.view(Shape{units_[u].padded}, dtype_);
}

Tensor ParameterStore::grads(size_t u) const {
  ZB_CHECK(whole_grads(), "stage ", geometry_.stage, " holds gradient shards only");
  if (!trainable(u)) return {};
  return units_[u].grads.view(Shape{units_[u].padded}, dtype_);
}

Tensor ParameterStore::param_shard(size_t u) const {
  const int64_t n = shard_numel(u);
  if (units_[u].whole_params) return params(u).flat_slice(shard_begin(u), shard_begin(u) + n);
  return units_[u].params.view(Shape{n}, dtype_);
}

Tensor ParameterStore::grad_shard(size_t u) const {
  if (!trainable(u)) return {};
  const int64_t n = shard_numel(u);
  if (whole_grads()) return grads(u).flat_slice(shard_begin(u), shard_begin(u) + n);
  return units_[u].grads.view(Shape{n}, dtype_);
}

Tensor ParameterStore::master(size_t u) const {
  ZB_CHECK(trainable(u), "unit ", layout_.unit(u).name, " is frozen: it has no optimizer state");
  ZB_CHECK(!units_[u].optimizer_on_host, "unit ", layout_.unit(u).name, "'s optimizer state lives on the host");
  return units_[u].master.bytes() ? state_view(units_[u].master, u) : optimizer_params(u);
}

Tensor ParameterStore::model_copy(size_t u) const {
  return units_[u].master.bytes() ? optimizer_params(u) : Tensor{};
}

MomentPointers ParameterStore::moment_pointers_of(size_t u) const {
  ZB_CHECK(trainable(u), "unit ", layout_.unit(u).name, " is frozen: it has no optimizer state");
  ZB_CHECK(!units_[u].optimizer_on_host, "unit ", layout_.unit(u).name, "'s optimizer state lives on the host");
  return moment_pointers(units_[u].moments.data(), optimizer_params(u).numel(), state_, master_dtype(dtype_));
}

Tensor ParameterStore::first_moment(size_t u) const {
  ZB_CHECK(!state_.quantized, "unit ", layout_.unit(u).name, "'s moments are 8-bit");
  const int64_t n = optimizer_params(u).numel();
  return Tensor(moment_pointers_of(u).m, Shape{n}, master_dtype(dtype_), units_[u].moments.device());
}

Tensor ParameterStore::second_moment(size_t u) const {
  ZB_CHECK(!state_.quantized, "unit ", layout_.unit(u).name, "'s moments are 8-bit");
  const int64_t n = optimizer_params(u).numel();
  void* v = moment_pointers_of(u).v;
  return v ? Tensor(v, Shape{n}, master_dtype(dtype_), units_[u].moments.device()) : Tensor{};
}

QuantizedMoments ParameterStore::quantized_moments(size_t u) const {
  ZB_CHECK(!units_[u].optimizer_on_host, "unit ", layout_.unit(u).name, "'s optimizer state lives on the host");
  return quantized_moments_at(u, units_[u].moments.data());
}

QuantizedMoments ParameterStore::quantized_moments_at(size_t u, void* moments) const {
  ZB_CHECK(state_.quantized, "unit ", layout_.unit(u).name, "'s moments are not 8-bit");
  QuantizedMoments q = moment_pointers(moments, optimizer_grad(u).numel(), state_).quantized;
  q.seed = seed_;
  q.first_element = unit_element(u, optimizer_begin(u));
  return q;
}

Tensor ParameterStore::state_view(const Buffer& b, size_t u) const {
  ZB_CHECK(!units_[u].optimizer_on_host, "unit ", layout_.unit(u).name, "'s optimizer state lives on the host");
  return b.view(Shape{sharded_optimizer() ? shard_numel(u) : units_[u].padded}, master_dtype(dtype_));
}

// The layout's values depend only on (seed, position), so threads fill disjoint chunks: one thread would need
// a minute for gpt2-xl's 1.6 billion values.
std::vector<float> initial_unit_values(const ParameterLayout& layout, size_t u, uint64_t seed, int64_t begin,
                                       int64_t count) {
  std::vector<float> values(count, 0.0f);
  const int64_t end = std::min(begin + count, layout.unit(u).numel);
  if (end <= begin) return values;
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 64);
  const int64_t chunk = std::max<int64_t>((end - begin + threads - 1) / threads, 1 << 20);
  std::vector<std::thread> workers;
  for (int64_t lo = begin; lo < end; lo += chunk) {
    const int64_t hi = std::min(end, lo + chunk);
    workers.emplace_back(
        [&layout, u, seed, lo, hi, out = values.data() + (lo - begin)] { layout.initialize(u, seed, lo, hi, out); });
  }
  for (std::thread& w : workers) w.join();
  return values;
}

namespace {

// Host weights take the values directly: fp32 as they are, bf16 and fp16 rounded to nearest even as on the device.
void write_on_host(const std::vector<float>& values, Tensor& weights) {
  if (weights.dtype == DType::f32) {
    std::copy(values.begin(), values.end(), static_cast<float*>(weights.data));
    return;
  }
  const auto round = sixteen_bit_conversions(weights.dtype).from_float;
  uint16_t* out = static_cast<uint16_t*>(weights.data);
  for (size_t i = 0; i < values.size(); ++i) out[i] = round(values[i]);
}

}  // namespace

void ParameterStore::draw_initial_values(Backend& backend, size_t u, uint64_t seed, int64_t begin, Tensor& out) const {
  backend.fill_zero(out);  // alignment gaps, padding rows, zero-initialised tensors, the shard past the unit's end
  const int64_t end = std::min(begin + out.numel(), layout_.unit(u).numel);
  if (end <= begin) return;
  for (const InitialFill& fill : layout_.initial_fills(u, begin, end)) {
    Tensor part = out.flat_slice(fill.first - begin, fill.first - begin + fill.count);
    if (fill.init == InitKind::ones) {
      backend.fill_value(part, 1.0);
    } else {
      backend.fill_normal(part, seed, fill.stream, fill.element, fill.std);
    }
  }
}

void ParameterStore::initialize(Backend& backend, uint64_t seed) {
  seed_ = seed;
  for (size_t u = 0; u < units_.size(); ++u) {
    // The weights this rank holds (the whole unit, or its shard) are computed once in fp32 on the host and
    // staged on the backend's device; the model-dtype weights and the fp32 master come from that one copy,
    // so they agree, and every rank holds the values the whole model would have there.
    const bool whole = units_[u].whole_params;
    const int64_t begin = whole ? 0 : shard_begin(u);
    Tensor weights = whole ? params(u) : param_shard(u);
    if (geometry_.params_on_host) {  // (and so is the optimizer state: nothing else to set here)
      write_on_host(initial_unit_values(layout_, u, seed, begin, weights.numel()), weights);
      continue;
    }
    // Drawn on the device: a host would take most of a minute for a 7B model on every rank.
    Buffer staging = allocator_.allocate(weights.shape, DType::f32, MemoryPool::workspace);
    Tensor staged = staging.view(weights.shape, DType::f32);
    draw_initial_values(backend, u, seed, begin, staged);
    if (weights.dtype == DType::f32) {
      backend.copy(staged, weights);
    } else {
      backend.convert(staged, weights);
    }
    if (units_[u].master.bytes()) {  // a separate fp32 master: its range of the staged values
      Tensor master_weights = master(u);
      const int64_t offset = (sharded_optimizer() ? shard_begin(u) : 0) - begin;
      backend.copy(staged.flat_slice(offset, offset + master_weights.numel()), master_weights);
    }
    if (trainable(u) && !units_[u].optimizer_on_host) {  // moments of zero: fp32 zeros, or codes and scales of zero
      const Buffer& moments = units_[u].moments;
      Tensor all(moments.data(), Shape{int64_t(moments.bytes() / sizeof(float))}, DType::f32, moments.device());
      backend.fill_zero(all);
    }
    backend.synchronize();  // before the staging buffer is freed
  }
  zero_gradients(backend);
}

void ParameterStore::zero_gradients(Backend& backend) {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!trainable(u)) continue;
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
