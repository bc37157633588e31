// ParameterStore: the model's weights, gradients and optimizer state as per-unit flat buffers in the
// ParameterLayout's order, partitioned across `world` ranks as the ZeRO stage says:
//
//   stage | model-dtype weights        | model-dtype gradients | fp32 master weights, Adam m and v
//   0     | whole                      | whole                 | whole
//   1     | whole                      | whole                 | rank's shard
//   2     | whole                      | rank's shard          | rank's shard
//   3     | rank's shard (units below  | rank's shard          | rank's shard
//         | the persistence threshold whole)
//
// Each unit is padded to a multiple of world * geometry.alignment elements so that it splits into equal
// shards; rank r owns elements [r * shard, (r + 1) * shard). Padding is zero in weights and gradients and stays zero.
// In fp32 training the weights are their own master copy (the master shard is a view of the weights).
// Whole gradients that stages 2-3 need during a unit's backward, and the gathered weights of stage 3, are
// the ZeroSchedule's transient buffers, not the store's. With params_on_host (the cpu_full strategy) the
// weights are in host memory, only the range this rank's optimizer updates (whole in stage 0, else the
// shard), and every unit reaches the device as stage 3's gathered units do. A frozen unit
// (ParameterUnit::trainable false: LoRA's base model) has weights only, held as the stage says; no gradient, master
// or moments.
#pragma once

#include <vector>

#include "core/tracking_allocator.h"
#include "kernels/backend.h"
#include "kernels/optimizer_state.h"
#include "models/parameter_layout.h"

namespace zb {

// Shards start on multiples of this many elements (256 bytes of bf16): vector loads and NCCL stay aligned.
constexpr int64_t kShardAlignment = 128;

struct ShardGeometry {
  int stage = 0;
  int rank = 0;
  int world = 1;
  int64_t persistence_threshold = 0;  // stage 3: units smaller than this keep whole weights
  bool optimizer_on_host = false;     // offload: no fp32 master or moments on the device (HostOptimizer's)
  bool params_on_host = false;        // cpu_full: the model-dtype weights live in host memory too
  // With optimizer_on_host: the share of the optimizer's elements the host holds (see host_optimizer_units).
  double offload_ratio = 1.0;
  // Shards start on multiples of this many elements: kShardAlignment, or with 8-bit moments the quantization
  // block (a multiple of it), so that every rank's blocks are those of one process and the stages agree.
  int64_t alignment = kShardAlignment;
};

// Elements [begin, begin + count) of unit u's initial weights under seed, in fp32 (zero past the unit's end:
// padding), computed on host threads. Every holder of a range of the weights starts from these values.
std::vector<float> initial_unit_values(const ParameterLayout& layout, size_t u, uint64_t seed, int64_t begin,
                                       int64_t count);

class ParameterStore {
 public:
  static constexpr int64_t kShardAlignment = zb::kShardAlignment;

  // state: the optimizer's moments (fp32 m and v, m alone for SGD, or 8-bit). host_allocator holds the weights
  // when geometry.params_on_host (and is not used otherwise).
  ParameterStore(const ParameterLayout& layout, TrackingAllocator& allocator, DType dtype, OptimizerStateFormat state,
                 ShardGeometry geometry = {}, TrackingAllocator* host_allocator = nullptr);
  ParameterStore(const ParameterStore&) = delete;  // refers to its layout, which must outlive it
  ParameterStore& operator=(const ParameterStore&) = delete;

  // fp32 master weights are separate buffers only when the model's own dtype is 16-bit.
  static bool has_separate_master(DType dtype) { return dtype != DType::f32 && dtype != DType::f64; }
  // The dtype of the master weights and the optimizer moments: fp32 beside 16-bit weights, else the weights'.
  static DType master_dtype(DType dtype) { return has_separate_master(dtype) ? DType::f32 : dtype; }
  // A unit's padded length for geometry.world ranks.
  static int64_t padded_numel(int64_t numel, const ShardGeometry& geometry);
  // Which units' optimizer state (fp32 master and moments) lives on the host: none without optimizer_on_host
  // (nor any frozen unit, which has none), every trainable unit with offload_ratio 1. Below 1, the model's first
  // units keep theirs on the device: in forward order (the embedding, the first blocks, ...) every unit that
  // still fits within 1 - offload_ratio of the optimizer's elements (whole units: the share kept may be less,
  // host_optimizer_share says how much).
  // The device updates them right after backward, the host the rest. Why the first:
  // the host's update bounds the step, so what matters is that the CPU never idles. The next forward starts
  // on the device's units without waiting for the host, which meanwhile updates the later ones; backward
  // finishes the host's units first, so the CPU speculates from backward's start, and the device's units'
  // backward runs while it catches up. (Kept at the end instead, the CPU idles through those units' forward
  // and backward, and the step was slower than with every unit on the host.) The same units on every rank.
  static std::vector<bool> host_optimizer_units(const ParameterLayout& layout, const ShardGeometry& geometry);
  // The share of the optimizer's elements on the host (0 without offload; of the trainable units' elements).
  static double host_optimizer_share(const ParameterLayout& layout, const ShardGeometry& geometry);
  // The length of the range a rank's optimizer updates in a unit of `padded` elements: all of it in stage
  // 0, the rank's shard otherwise.
  static int64_t optimizer_numel(int64_t padded, const ShardGeometry& geometry) {
    return geometry.stage >= 1 ? padded / geometry.world : padded;
  }

  // Fills the weights from the layout's seeded initialisation (each rank its part, the values those of the
  // whole model) and zeroes gradients and optimizer state.
  void initialize(Backend& backend, uint64_t seed);
  void zero_gradients(Backend& backend);

  const ParameterLayout& layout() const { return layout_; }
  const ShardGeometry& geometry() const { return geometry_; }
  DType dtype() const { return dtype_; }
  size_t unit_count() const { return units_.size(); }
  int64_t padded_numel(size_t u) const { return units_[u].padded; }
  int64_t shard_numel(size_t u) const { return units_[u].padded / geometry_.world; }
  int64_t shard_begin(size_t u) const { return geometry_.rank * shard_numel(u); }

  // Whether unit u is trained: it has gradients and optimizer state (see ParameterUnit::trainable).
  bool trainable(size_t u) const { return layout_.unit(u).trainable; }
  // Whether the whole weights (gradients) of unit u are held here, and the optimizer state only a shard.
  bool whole_params(size_t u) const { return units_[u].whole_params; }
  // Whether unit u's weights stay on the device, whole, for the model to read in place (no gathering).
  bool resident_params(size_t u) const { return units_[u].whole_params && !geometry_.params_on_host; }
  bool params_on_host() const { return geometry_.params_on_host; }
  bool whole_grads() const { return geometry_.stage < 2; }
  bool sharded_optimizer() const { return geometry_.stage >= 1; }
  // Whether unit u's optimizer state is the host optimizer's (see host_optimizer_units).
  bool optimizer_on_host(size_t u) const { return units_[u].optimizer_on_host; }

  // Flat 1-D views, all padded. params/grads: the whole unit (only where held whole). The gradient views of a
  // frozen unit are empty.
  Tensor params(size_t u) const;
  Tensor grads(size_t u) const;
  // The rank's shard of the weights and of the gradient (slices of the whole buffers where those are held).
  Tensor param_shard(size_t u) const;
  Tensor grad_shard(size_t u) const;
  // What the optimizer updates: the whole unit in stage 0, the rank's shard otherwise. master is fp32 (the
  // weights themselves in fp32 training; only where the state is on the device); model_copy is the
  // model-dtype weights it writes (empty in fp32).
  Tensor optimizer_grad(size_t u) const { return sharded_optimizer() ? grad_shard(u) : grads(u); }
  // The weights the optimizer's update is written to (the shard, or the whole unit in stage 0).
  Tensor optimizer_params(size_t u) const { return sharded_optimizer() ? param_shard(u) : params(u); }
  // Where the optimizer's range starts in the unit.
  int64_t optimizer_begin(size_t u) const { return sharded_optimizer() ? shard_begin(u) : 0; }
  Tensor master(size_t u) const;
  Tensor model_copy(size_t u) const;
  // fp32 moments (of the master's dtype; second_moment empty for SGD).
  Tensor first_moment(size_t u) const;
  Tensor second_moment(size_t u) const;
  // 8-bit moments: the codes and scales of unit u's optimizer range, with stochastic rounding's seed (the
  // run's, from initialize) and the range's first element (unit_element).
  QuantizedMoments quantized_moments(size_t u) const;
  // The same for a copy of that range's moments at `moments` (the host optimizer's, laid out as state_format()
  // says): where they are, and how their elements are numbered.
  QuantizedMoments quantized_moments_at(size_t u, void* moments) const;
  const OptimizerStateFormat& state_format() const { return state_; }

  // Whole-unit views for binding a model (stages 0-2: every unit is whole).
  std::vector<Tensor> all_params() const;
  std::vector<Tensor> all_grads() const;

 private:
  struct Unit {
    int64_t padded = 0;
    bool whole_params = true;
    bool optimizer_on_host = false;
    Buffer params, grads, master;  // sized whole or shard as the stage says
    Buffer moments;                // the optimizer range's, laid out as state_ says (kernels/optimizer_state.h)
  };
  Tensor state_view(const Buffer& b, size_t u) const;
  MomentPointers moment_pointers_of(size_t u) const;
  // Elements [begin, begin + out.numel()) of unit u's initial weights (as initial_unit_values), drawn by the
  // backend into out (fp32, on its device).
  void draw_initial_values(Backend& backend, size_t u, uint64_t seed, int64_t begin, Tensor& out) const;

  const ParameterLayout& layout_;
  TrackingAllocator& allocator_;  // for initialize's fp32 staging
  DType dtype_;
  OptimizerStateFormat state_;
  ShardGeometry geometry_;
  uint64_t seed_ = 0;  // initialize's
  std::vector<Unit> units_;
};

}  // namespace zb
