// The CPU optimizer of the offload strategies: AdamW, Adam and SGD over a shard's fp32 master weights and
// moments in (pinned) host memory, bf16 (or fp16) gradients in, bf16 (fp16) weights out: the GPU's fused optimizer kernel up to
// rounding (bias corrections in double, folded into a step size and a factor under the square root so that
// an element costs one division; the clipping factor applied to the gradient first).
// Vectorised with AVX-512 or AVX2+FMA, chosen at run time from what the CPU supports, over OpenMP threads.
// The CPU reference backend (kernels/cpu) is its oracle.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"
#include "kernels/adam_8bit.h"
#include "kernels/optimizer_params.h"

namespace zb {

enum class SimdLevel { scalar, avx2, avx512 };

// The widest level this CPU runs.
SimdLevel best_simd_level();
std::string_view simd_level_name(SimdLevel level);

// One shard's update. v is unused (may be null) for SGD; params_out may be null when no copy is wanted, and
// may be grad itself (each position's gradient is read before its weight is written there).
// The state is updated in place, or, with master_in/m_in/v_in set, read from those and written to
// master/m/v (the speculative update of the offload strategies keeps the state it started from).
// Gradients and the weights' copy are of the model's dtype: bf16 or fp16 bits (mixed precision), or fp32 (the
// CPU backend's training dtype; those take the scalar path, which is there for correctness, not speed).
struct CpuOptimizerShard {
  float* master = nullptr;
  const void* grad = nullptr;  // of `model`'s dtype
  float* m = nullptr;
  float* v = nullptr;
  void* params_out = nullptr;  // of `model`'s dtype, rounded to nearest even
  int64_t n = 0;
  DType model = DType::bf16;  // bf16, f16 or f32
  const float* master_in = nullptr;  // null: master itself (likewise m_in and v_in)
  const float* m_in = nullptr;
  const float* v_in = nullptr;
  // Adam's moments in 8 bits (kernels/adam_8bit.h) in place of m and v, block by block: read from
  // quantized_in where that is set (with master_in; out of place), else updated in place.
  std::optional<QuantizedMoments> quantized = std::nullopt, quantized_in = std::nullopt;
};

// The threads a CPU optimizer run beside training uses: OMP_NUM_THREADS where it is set, else one fewer than
// this rank's share of the processors: those this process may run on, over the ranks_per_host ranks that share
// them where the process may run on every processor (a rank bound to some has its share already). The training thread spends the update waiting on the GPU, and CUDA waits by spinning (its
// default below one context per core); an optimizer thread sharing that core gets half of it, and every unit's
// update ends only when that thread's last chunk does (a step with as many threads as cores measured about a
// tenth slower than with one fewer). Ranks that each took every core would run several threads a core, and
// each unit's parallel loop would wait for threads the scheduler has set aside.
int optimizer_threads_beside_training(int ranks_per_host = 1);
// Makes the calling thread's later CPU optimizer steps use `threads` threads.
void use_optimizer_threads(int threads);

// Throws zb::Error when `level` is wider than this CPU runs.
void cpu_optimizer_step(const CpuOptimizerShard& shard, const OptimizerParams& params, SimdLevel level);
inline void cpu_optimizer_step(const CpuOptimizerShard& shard, const OptimizerParams& params) {
  cpu_optimizer_step(shard, params, best_simd_level());
}

}  // namespace zb
