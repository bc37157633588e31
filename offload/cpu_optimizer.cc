// Each SIMD level is one function compiled for its instruction set (GCC's target attribute), so the file
// builds without -mavx flags and the choice is made at run time. Every level computes element by element
// what the scalar path computes (the scalar path handles the tails), with FMA where the hardware has it.
#include "offload/cpu_optimizer.h"

#include <immintrin.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <type_traits>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/bf16.h"
#include "core/f16.h"
#include "core/check.h"
#include "core/trace.h"
#include "kernels/blockwise_quantization.h"
#include "offload/cpu_optimizer_8bit.h"

namespace zb {

namespace {

// Adam's bias corrections are folded into two factors (computed in double): the step size lr / (1 - beta1^t)
// and 1 / (1 - beta2^t) under the square root, so an element costs one division and one square root.
struct Coefficients {
  float lr, beta1, beta2, eps, wd, scale, step_size, inv_bias2, momentum;
  bool adam, decoupled;
};

Coefficients coefficients_of(const OptimizerParams& p) {
  const bool adam = p.kind != OptimizerKind::sgd;
  return {p.lr,
          p.beta1,
          p.beta2,
          p.eps,
          p.weight_decay,
          p.grad_scale,
          adam ? float(double(p.lr) / (1.0 - std::pow(double(p.beta1), double(p.step)))) : p.lr,
          adam ? float(1.0 / (1.0 - std::pow(double(p.beta2), double(p.step)))) : 1.0f,
          p.momentum,
          adam,
          p.kind == OptimizerKind::adamw};
}

// Where the shard's state is read from: the *_in arrays where given, else the state itself (in place).
struct StateInputs {
  const float *master, *m, *v;
};
StateInputs state_inputs(const CpuOptimizerShard& s) {
  return {s.master_in ? s.master_in : s.master, s.m_in ? s.m_in : s.m, s.v_in ? s.v_in : s.v};
}

// The model's 16-bit element types, as their bits.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
inline float load_value(const Bf16* p, int64_t i) { return bf16_bits_to_float(p[i].bits); }
inline float load_value(const F16* p, int64_t i) { return f16_bits_to_float(p[i].bits); }
inline float load_value(const float* p, int64_t i) { return p[i]; }
inline void store_value(Bf16* p, int64_t i, float x) { p[i].bits = float_to_bf16_bits(x); }
inline void store_value(F16* p, int64_t i, float x) { p[i].bits = float_to_f16_bits(x); }
inline void store_value(float* p, int64_t i, float x) { p[i] = x; }

// The scalar path's element type of a 16-bit model.
template <bool kHalf>
using Sixteen = std::conditional_t<kHalf, F16, Bf16>;

// fn.template operator()<Model>() with the element type of a model of `dtype`: float, F16 or Bf16.
template <typename Fn>
void with_model_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn.template operator()<float>();
    case DType::f16: return fn.template operator()<F16>();
    default: return fn.template operator()<Bf16>();
  }
}

// Out of place (the speculative update), the state and the weights go to memory that is not in cache: a
// plain store would first read each line (read-for-ownership), 14 more bytes per element on a kernel that
// memory bounds. Non-temporal stores skip that read; they need aligned addresses, so they are used where the
// arrays are aligned (the host allocator's are), and never in place, where the lines were just read anyway.
struct Streaming {
  bool state = false, weights = false;
};

Streaming streaming_for(const CpuOptimizerShard& s) {
  auto aligned = [](const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; };
  Streaming out;
  out.state = s.master_in && s.m_in && aligned(s.master, 64) && aligned(s.m, 64) && (!s.v || aligned(s.v, 64));
  out.weights = out.state && s.params_out && s.params_out != s.grad && aligned(s.params_out, 32);
  return out;
}

__attribute__((target("avx2,fma"))) inline void store8(float* p, __m256 x, bool stream) {
  if (stream) {
    _mm256_stream_ps(p, x);
  } else {
    _mm256_storeu_ps(p, x);
  }
}

__attribute__((target("avx512f"))) inline void store16(float* p, __m512 x, bool stream) {
  if (stream) {
    _mm512_stream_ps(p, x);
  } else {
    _mm512_storeu_ps(p, x);
  }
}

// Elements [begin, end), one at a time: the reference the vector paths follow. Model is the gradients' and
// the weights' copy's element type (Bf16, F16 or float).
template <typename Model>
void step_scalar(const CpuOptimizerShard& s, const Coefficients& c, int64_t begin, int64_t end) {
  const Model* grad = static_cast<const Model*>(s.grad);
  Model* out = static_cast<Model*>(s.params_out);
  const auto [master_in, m_in, v_in] = state_inputs(s);
  for (int64_t i = begin; i < end; ++i) {
    float param = master_in[i];
    float g = load_value(grad, i) * c.scale;
    if (c.adam) {
      if (!c.decoupled) g += c.wd * param;
      const float mi = c.beta1 * m_in[i] + (1 - c.beta1) * g;
      const float vi = c.beta2 * v_in[i] + (1 - c.beta2) * g * g;
      s.m[i] = mi;
      s.v[i] = vi;
      if (c.decoupled) param -= c.lr * c.wd * param;
      param -= c.step_size * mi / (std::sqrt(vi * c.inv_bias2) + c.eps);
    } else {
      g += c.wd * param;
      const float mi = c.momentum * m_in[i] + g;
      s.m[i] = mi;
      param -= c.lr * mi;
    }
    s.master[i] = param;
    if (out) store_value(out, i, param);
  }
}

// bf16 rounding to nearest even of 32-bit float bit patterns (NaN excepted: gradients were checked finite).
__attribute__((target("avx2,fma"))) __m256i round_to_bf16_avx2(__m256i bits) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
}

// kHalf: the model is fp16 (the F16C conversions, rounding to nearest even), else bf16.
template <bool kHalf>
__attribute__((target("avx2,fma,f16c"))) void step_avx2(const CpuOptimizerShard& s, const Coefficients& c,
                                                        Streaming streaming, int64_t begin, int64_t end) {
  const __m256 lr = _mm256_set1_ps(c.lr), b1 = _mm256_set1_ps(c.beta1), b2 = _mm256_set1_ps(c.beta2);
  const __m256 one_b1 = _mm256_set1_ps(1 - c.beta1), one_b2 = _mm256_set1_ps(1 - c.beta2);
  const __m256 eps = _mm256_set1_ps(c.eps), wd = _mm256_set1_ps(c.wd), scale = _mm256_set1_ps(c.scale);
  const __m256 step_size = _mm256_set1_ps(c.step_size), inv_bias2 = _mm256_set1_ps(c.inv_bias2);
  const __m256 mu = _mm256_set1_ps(c.momentum);
  const __m256 decay = _mm256_set1_ps(1 - c.lr * c.wd);
  const auto* grad = static_cast<const uint16_t*>(s.grad);
  auto* out = static_cast<uint16_t*>(s.params_out);
  const auto [master_in, m_in, v_in] = state_inputs(s);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m128i g16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(grad + i));
    __m256 g = kHalf ? _mm256_cvtph_ps(g16) : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(g16), 16));
    g = _mm256_mul_ps(g, scale);
    __m256 param = _mm256_loadu_ps(master_in + i);
    const __m256 m = _mm256_loadu_ps(m_in + i);
    if (c.adam) {
      if (!c.decoupled) g = _mm256_fmadd_ps(wd, param, g);
      const __m256 mi = _mm256_fmadd_ps(b1, m, _mm256_mul_ps(one_b1, g));
      const __m256 vi = _mm256_fmadd_ps(b2, _mm256_loadu_ps(v_in + i), _mm256_mul_ps(_mm256_mul_ps(one_b2, g), g));
      store8(s.m + i, mi, streaming.state);
      store8(s.v + i, vi, streaming.state);
      if (c.decoupled) param = _mm256_mul_ps(param, decay);
      const __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, inv_bias2)), eps);
      param = _mm256_sub_ps(param, _mm256_div_ps(_mm256_mul_ps(step_size, mi), denom));
    } else {
      g = _mm256_fmadd_ps(wd, param, g);
      const __m256 mi = _mm256_fmadd_ps(mu, m, g);
      store8(s.m + i, mi, streaming.state);
      param = _mm256_fnmadd_ps(lr, mi, param);
    }
    store8(s.master + i, param, streaming.state);
    if (out) {
      __m128i packed;
      if constexpr (kHalf) {
        packed = _mm256_cvtps_ph(param, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      } else {
        const __m256i rounded = round_to_bf16_avx2(_mm256_castps_si256(param));
        // Pack the eight 32-bit halves into 16 bits: packus works per 128-bit lane, the permute joins the lanes.
        packed = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0x08));
      }
      auto* target = reinterpret_cast<__m128i*>(out + i);
      if (streaming.weights) {
        _mm_stream_si128(target, packed);
      } else {
        _mm_storeu_si128(target, packed);
      }
    }
  }
  step_scalar<Sixteen<kHalf>>(s, c, i, end);
  if (streaming.state) _mm_sfence();  // the streamed lines are visible before the unit is marked done
}

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized inside its own intrinsics (their _mm512_undefined
// operands); the warning is about the header, not this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <bool kHalf>
__attribute__((target("avx512f"))) void step_avx512(const CpuOptimizerShard& s, const Coefficients& c,
                                                    Streaming streaming, int64_t begin, int64_t end) {
  const __m512 lr = _mm512_set1_ps(c.lr), b1 = _mm512_set1_ps(c.beta1), b2 = _mm512_set1_ps(c.beta2);
  const __m512 one_b1 = _mm512_set1_ps(1 - c.beta1), one_b2 = _mm512_set1_ps(1 - c.beta2);
  const __m512 eps = _mm512_set1_ps(c.eps), wd = _mm512_set1_ps(c.wd), scale = _mm512_set1_ps(c.scale);
  const __m512 step_size = _mm512_set1_ps(c.step_size), inv_bias2 = _mm512_set1_ps(c.inv_bias2);
  const __m512 mu = _mm512_set1_ps(c.momentum);
  const __m512 decay = _mm512_set1_ps(1 - c.lr * c.wd);
  const __m512i round_bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const auto* grad = static_cast<const uint16_t*>(s.grad);
  auto* out = static_cast<uint16_t*>(s.params_out);
  const auto [master_in, m_in, v_in] = state_inputs(s);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m256i g16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grad + i));
    __m512 g = kHalf ? _mm512_cvtph_ps(g16) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(g16), 16));
    g = _mm512_mul_ps(g, scale);
    __m512 param = _mm512_loadu_ps(master_in + i);
    const __m512 m = _mm512_loadu_ps(m_in + i);
    if (c.adam) {
      if (!c.decoupled) g = _mm512_fmadd_ps(wd, param, g);
      const __m512 mi = _mm512_fmadd_ps(b1, m, _mm512_mul_ps(one_b1, g));
      const __m512 vi = _mm512_fmadd_ps(b2, _mm512_loadu_ps(v_in + i), _mm512_mul_ps(_mm512_mul_ps(one_b2, g), g));
      store16(s.m + i, mi, streaming.state);
      store16(s.v + i, vi, streaming.state);
      if (c.decoupled) param = _mm512_mul_ps(param, decay);
      const __m512 denom = _mm512_add_ps(_mm512_sqrt_ps(_mm512_mul_ps(vi, inv_bias2)), eps);
      param = _mm512_sub_ps(param, _mm512_div_ps(_mm512_mul_ps(step_size, mi), denom));
    } else {
      g = _mm512_fmadd_ps(wd, param, g);
      const __m512 mi = _mm512_fmadd_ps(mu, m, g);
      store16(s.m + i, mi, streaming.state);
      param = _mm512_fnmadd_ps(lr, mi, param);
    }
    store16(s.master + i, param, streaming.state);
    if (out) {
      __m256i packed;
      if constexpr (kHalf) {
        packed = _mm512_cvtps_ph(param, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      } else {
        const __m512i bits = _mm512_castps_si512(param);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
        const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(round_bias, lsb)), 16);
        packed = _mm512_cvtepi32_epi16(rounded);
      }
      auto* target = reinterpret_cast<__m256i*>(out + i);
      if (streaming.weights) {
        _mm256_stream_si256(target, packed);
      } else {
        _mm256_storeu_si256(target, packed);
      }
    }
  }
  step_scalar<Sixteen<kHalf>>(s, c, i, end);
  if (streaming.state) _mm_sfence();  // the streamed lines are visible before the unit is marked done
}
#pragma GCC diagnostic pop

}  // namespace

int optimizer_threads_beside_training(int ranks_per_host) {
  const char* set = std::getenv("OMP_NUM_THREADS");
  if (set != nullptr && *set != '\0') return omp_get_max_threads();
  // A rank bound to some of the cores (mpirun's default binding) sees only those: its share already.
  const int procs = omp_get_num_procs();
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int share = online > 0 && procs >= online ? procs / std::max(1, ranks_per_host) : procs;
  return std::max(1, share - 1);
}

void use_optimizer_threads(int threads) { omp_set_num_threads(std::max(1, threads)); }

SimdLevel best_simd_level() {
  if (__builtin_cpu_supports("avx512f")) return SimdLevel::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return SimdLevel::avx2;
  }
  return SimdLevel::scalar;
}

std::string_view simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512: return "avx512";
    case SimdLevel::avx2: return "avx2";
    case SimdLevel::scalar: break;
  }
  return "scalar";
}

namespace {

// One OpenMP thread's share of an update, as a slice of its own in a trace (where one is taken): from the
// parallel region's start to the thread's last chunk. Each thread is named after its number in the team once.
class OptimizerThreadSlice {
 public:
  OptimizerThreadSlice() {
    if (!Tracer::get().is_open()) return;
    // (Thread 0 is the caller, named by its own code: the host update's thread.)
    thread_local bool named = false;
    if (!named && omp_get_thread_num() != 0)
      Tracer::get().name_this_thread("cpu optimizer " + std::to_string(omp_get_thread_num()));
    named = true;
    slice_.emplace(TraceCategory::cpu_optimizer, "cpu_optimizer");
  }

 private:
  std::optional<TraceScope> slice_;
};

// A skipped step: the weights the master rounds to, and nothing else changes (out of place, the state is
// copied to where the step's output belongs).
void write_weights_of_master(const CpuOptimizerShard& shard) {
  const float* master = shard.master_in ? shard.master_in : shard.master;
  if (shard.master_in) {
    std::copy_n(shard.master_in, shard.n, shard.master);
    if (shard.quantized_in) {
      const QuantizedMoments &in = *shard.quantized_in, &out = *shard.quantized;
      const int64_t blocks = quantization_blocks(shard.n);
      std::copy_n(in.m_codes, shard.n, out.m_codes);
      std::copy_n(in.v_codes, shard.n, out.v_codes);
      std::copy_n(in.m_scales, blocks, out.m_scales);
      std::copy_n(in.v_scales, blocks, out.v_scales);
    } else {
      std::copy_n(shard.m_in, shard.n, shard.m);
      if (shard.v_in) std::copy_n(shard.v_in, shard.n, shard.v);
    }
  }
  with_model_type(shard.model, [&]<typename Model>() {
    Model* out = static_cast<Model*>(shard.params_out);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < shard.n; ++i) store_value(out, i, master[i]);
  });
}

// The 8-bit-moment update, a quantization block at a time: the block's gradients read to fp32, the block
// updated (kernels/adam_8bit.h), the new weights written in the model's dtype.
void step_8bit(const CpuOptimizerShard& s, const OptimizerParams& params, SimdLevel level) {
  ZB_CHECK(bool(s.master_in) == bool(s.quantized_in), "8-bit moments out of place need the master's input too");
  const float* master_in = s.master_in ? s.master_in : s.master;
  const QuantizedMoments& in = s.quantized_in ? *s.quantized_in : *s.quantized;
  const int64_t blocks = quantization_blocks(s.n);
  with_model_type(s.model, [&]<typename Model>() {
    const Model* grad = static_cast<const Model*>(s.grad);
    Model* out = static_cast<Model*>(s.params_out);
#pragma omp parallel
    {
      const OptimizerThreadSlice slice;
#pragma omp for schedule(dynamic, 4) nowait
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t begin = b * kQuantizationBlock, count = std::min(kQuantizationBlock, s.n - begin);
        float g[kQuantizationBlock];
        for (int64_t k = 0; k < count; ++k) g[k] = load_value(grad, begin + k);
        if (level == SimdLevel::avx512 && vector_takes_block(count)) {
          adam_8bit_block_avx512(master_in + begin, s.master + begin, g, count, in, *s.quantized, b, params);
        } else if (level == SimdLevel::avx2 && vector_takes_block(count)) {
          adam_8bit_block_avx2(master_in + begin, s.master + begin, g, count, in, *s.quantized, b, params);
        } else {
          adam_8bit_block(master_in + begin, s.master + begin, g, count, in, *s.quantized, b, params);
        }
        if (out) {
          for (int64_t k = 0; k < count; ++k) store_value(out, begin + k, s.master[begin + k]);
        }
      }
    }
  });
}

}  // namespace

void cpu_optimizer_step(const CpuOptimizerShard& shard, const OptimizerParams& params, SimdLevel level) {
  ZB_CHECK(int(level) <= int(best_simd_level()), "this CPU does not run ", simd_level_name(level));
  ZB_CHECK(shard.model == DType::f32 || shard.model == DType::bf16 || shard.model == DType::f16,
           "cpu_optimizer_step: models are fp32, bf16 or fp16, not ", dtype_name(shard.model));
  ZB_CHECK(shard.n >= 0 && shard.master && shard.grad &&
               (shard.quantized || (shard.m && (params.kind == OptimizerKind::sgd || shard.v))),
           "cpu_optimizer_step: missing buffers");
  if (params.skip) return write_weights_of_master(shard);
  if (shard.quantized) return step_8bit(shard, params, level);
  const Coefficients c = coefficients_of(params);
  const Streaming streaming = streaming_for(shard);
  // Chunks of 64 KiB of master weights, a multiple of every vector width, so only the last one has a tail.
  // Handed out dynamically, a few at a time: in training other threads share the cores (the one waiting on the
  // GPU spins on one), and with a static split the thread that shares a core would set the pace of all.
  // (The pinned state is first touched by the thread that allocates it, so a static split keeps no locality.)
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (shard.n + kChunk - 1) / kChunk;
  with_model_type(shard.model, [&]<typename Model>() {
    constexpr bool kHalf = std::is_same_v<Model, F16>;
#pragma omp parallel
    {
      const OptimizerThreadSlice slice;
#pragma omp for schedule(dynamic, 4) nowait
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        const int64_t begin = chunk * kChunk, end = std::min(shard.n, begin + kChunk);
        if constexpr (std::is_same_v<Model, float>) {
          step_scalar<float>(shard, c, begin, end);  // (the CPU backend's dtype: no vector path)
        } else {
          switch (level) {
            case SimdLevel::avx512: step_avx512<kHalf>(shard, c, streaming, begin, end); break;
            case SimdLevel::avx2: step_avx2<kHalf>(shard, c, streaming, begin, end); break;
            case SimdLevel::scalar: step_scalar<Model>(shard, c, begin, end); break;
          }
        }
      }
    }
  });
}

}  // namespace zb
