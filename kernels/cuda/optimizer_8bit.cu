// Adam and AdamW with 8-bit moments on the GPU (kernels/adam_8bit.h is the reference): a thread block a
// quantization block (2048 elements, 8 a thread), the maps' tables in shared memory. Each thread reads its
// elements' codes and the block's scales, updates them as fp32 Adam does, and the block's new largest
// magnitudes (a block reduction) scale the codes it writes back, rounded stochastically with Philox by
// (seed, stream, element) as the host does.
#include <mutex>

#include "core/random.h"
#include "kernels/adam_element.h"
#include "kernels/blockwise_quantization.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace zb::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = int(kQuantizationBlock) / kThreads;  // 8
static_assert(kPerThread == 8, "two Philox draws of four a thread");

// One map as the kernel reads it: values by code, and the values in increasing order with their codes.
struct MapTables {
  float values[256];
  float sorted[256];
  uint8_t codes[256];
};
struct Tables {
  MapTables first, second;  // the signed map (m), the unsigned map (v)
};

// This device's copy of the tables, uploaded on first use.
const Tables* device_tables() {
  constexpr int kMaxDevices = 64;
  static Tables* tables[kMaxDevices] = {};
  static std::once_flag uploaded[kMaxDevices];
  int device = 0;
  ZB_CUDA_CHECK(cudaGetDevice(&device));
  ZB_CHECK(device >= 0 && device < kMaxDevices, "CUDA device ", device, " beyond the ", kMaxDevices, " supported");
  std::call_once(uploaded[device], [&] {
    Tables host{};
    const auto fill = [](MapTables& out, const DynamicMap& map) {
      for (int i = 0; i < 256; ++i) {
        out.values[i] = map.values()[i];
        out.sorted[i] = map.sorted_values()[i];
        out.codes[i] = map.sorted_codes()[i];
      }
    };
    fill(host.first, DynamicMap::signed_map());
    fill(host.second, DynamicMap::unsigned_map());
    ZB_CUDA_CHECK(cudaMalloc(&tables[device], sizeof(Tables)));
    ZB_CUDA_CHECK(cudaMemcpy(tables[device], &host, sizeof(Tables), cudaMemcpyHostToDevice));
  });
  return tables[device];
}

// DynamicMap::nearest and round_stochastically, on a map's tables in shared memory (the count of values at or
// below x read off the map's structure: count_at_or_below).
__device__ uint8_t nearest_code(const MapTables& t, float x, bool is_signed) {
  // The nearer of the first value above x and the one below; a tie goes to the lower, as on the host. (At x = 0,
  // a block of zeros, the signed map's -0 (code 128) where the host's search of midpoints gives +0 (code 0): the
  // same value.)
  const int lo = count_at_or_below(t.sorted, x, is_signed);
  if (lo == 0) return t.codes[0];
  if (lo == 256) return t.codes[255];
  const float below = t.sorted[lo - 1], above = t.sorted[lo];
  return x <= 0.5f * (below + above) ? t.codes[lo - 1] : t.codes[lo];
}

__device__ uint8_t stochastic_code(const MapTables& t, float x, float u, bool is_signed) {
  const int lo = count_at_or_below(t.sorted, x, is_signed);
  if (lo == 0) return t.codes[0];
  if (lo == 256) return t.codes[255];
  const float share = (x - t.sorted[lo - 1]) / (t.sorted[lo] - t.sorted[lo - 1]);
  return u < share ? t.codes[lo] : t.codes[lo - 1];
}

// A thread's eight consecutive elements of one array, moved in one or two vector instructions where the array's
// start is aligned (16 bytes; 8 for codes) and all eight are in range.
template <typename E>
struct alignas(8 * sizeof(E) >= 16 ? 16 : 8) Eight {
  E v[8];
};

template <typename E>
__device__ __forceinline__ Eight<E> load_eight(const E* p) {
  Eight<E> out;
  if constexpr (sizeof(Eight<E>) == 8) {
    *reinterpret_cast<uint2*>(&out) = *reinterpret_cast<const uint2*>(p);
  } else {
#pragma unroll
    for (int i = 0; i < int(sizeof(Eight<E>) / 16); ++i)
      reinterpret_cast<uint4*>(&out)[i] = reinterpret_cast<const uint4*>(p)[i];
  }
  return out;
}

template <typename E>
__device__ __forceinline__ void store_eight(E* p, const Eight<E>& in) {
  if constexpr (sizeof(Eight<E>) == 8) {
    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(&in);
  } else {
#pragma unroll
    for (int i = 0; i < int(sizeof(Eight<E>) / 16); ++i)
      reinterpret_cast<uint4*>(p)[i] = reinterpret_cast<const uint4*>(&in)[i];
  }
}

__device__ float block_max(float x, float* scratch) {
  x = warp_max(x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) total = fmaxf(total, scratch[w]);
  __syncthreads();  // (scratch is reused)
  return total;
}

struct Step {
  AdamElement<float> adam;
  float grad_scale;
  const float* grad_factor;  // see OptimizerParams::grad_factor
  uint64_t seed, first_element, stream;
  bool aligned;  // every array's start aligned for the eight-element vector moves (load_eight)
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    adam_8bit_kernel(float* master, const T* grad, uint8_t* m_codes, uint8_t* v_codes, float* m_scales, float* v_scales,
                     T* params_out, int64_t n, const Tables* tables, Step step) {
  __shared__ Tables t;
  __shared__ float scratch[kThreads / 32];
  for (int i = threadIdx.x; i < int(sizeof(Tables) / sizeof(float)); i += kThreads) {
    reinterpret_cast<float*>(&t)[i] = reinterpret_cast<const float*>(tables)[i];
  }
  __syncthreads();
  float grad_scale = step.grad_scale;
  if (step.grad_factor != nullptr) {
    grad_scale = *step.grad_factor;
    if (!isfinite(grad_scale)) return;  // the step is skipped: nothing changes (every thread returns)
  }
  const int64_t block = blockIdx.x, begin = block * kQuantizationBlock;
  const int64_t first = begin + int64_t(threadIdx.x) * kPerThread;
  const bool whole = step.aligned && first + kPerThread <= n;  // (else element by element, those in range)
  const float m_scale = m_scales[block], v_scale = v_scales[block];
  Eight<float> param;
  Eight<T> g;
  Eight<uint8_t> m_code, v_code;
  if (whole) {
    param = load_eight(master + first);
    g = load_eight(grad + first);
    m_code = load_eight(m_codes + first);
    v_code = load_eight(v_codes + first);
  } else {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t i = first + k;
      param.v[k] = i < n ? master[i] : 0.0f;
      g.v[k] = i < n ? grad[i] : from_float<T>(0.0f);
      m_code.v[k] = i < n ? m_codes[i] : 0;
      v_code.v[k] = i < n ? v_codes[i] : 0;
    }
  }
  float m[kPerThread], v[kPerThread];
  float m_peak = 0.0f, v_peak = 0.0f;
  Eight<T> weights;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    m[k] = v[k] = 0.0f;
    if (first + k >= n) continue;
    m[k] = t.first.values[m_code.v[k]] * m_scale;
    v[k] = t.second.values[v_code.v[k]] * v_scale;
    param.v[k] = step.adam(param.v[k], to_float(g.v[k]) * grad_scale, m[k], v[k]);
    weights.v[k] = from_float<T>(param.v[k]);
    m_peak = fmaxf(m_peak, fabsf(m[k]));
    v_peak = fmaxf(v_peak, fabsf(v[k]));
  }
  if (whole) {
    store_eight(master + first, param);
    if (params_out) store_eight(params_out + first, weights);
  } else {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      if (first + k >= n) continue;
      master[first + k] = param.v[k];
      if (params_out) params_out[first + k] = weights.v[k];
    }
  }
  const float new_m_scale = block_max(m_peak, scratch), new_v_scale = block_max(v_peak, scratch);
  const float m_inverse = new_m_scale > 0 ? 1.0f / new_m_scale : 0.0f;
  const float v_inverse = new_v_scale > 0 ? 1.0f / new_v_scale : 0.0f;
#pragma unroll
  for (int half = 0; half < kPerThread / 4; ++half) {
    const uint64_t element = step.first_element + uint64_t(first + 4 * half);
    const auto m_words = random_words(step.seed, step.stream, element / 4);
    const auto v_words = random_words(step.seed, step.stream + 1, element / 4);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int j = 4 * half + k;
      const float um = rounding_uniform(m_words[k]), uv = rounding_uniform(v_words[k]);
      const float xm = m[j] * m_inverse, xv = v[j] * v_inverse;
      m_code.v[j] =
          fabsf(m[j]) == new_m_scale ? nearest_code(t.first, xm, true) : stochastic_code(t.first, xm, um, true);
      v_code.v[j] =
          fabsf(v[j]) == new_v_scale ? nearest_code(t.second, xv, false) : stochastic_code(t.second, xv, uv, false);
    }
  }
  if (whole) {
    store_eight(m_codes + first, m_code);
    store_eight(v_codes + first, v_code);
  } else {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      if (first + k >= n) continue;
      m_codes[first + k] = m_code.v[k];
      v_codes[first + k] = v_code.v[k];
    }
  }
  if (threadIdx.x == 0) m_scales[block] = new_m_scale, v_scales[block] = new_v_scale;
}

}  // namespace

template <typename T>
void adam_8bit_step(float* master, const T* grad, const QuantizedMoments& moments, T* params_out, int64_t n,
                    const OptimizerParams& p, cudaStream_t stream) {
  ZB_CHECK(p.kind == OptimizerKind::adamw || p.kind == OptimizerKind::adam, "8-bit moments are Adam's and AdamW's");
  ZB_CHECK(moments.first_element % 4 == 0, "8-bit moments start at a multiple of 4 elements");
  if (n == 0) return;
  const auto on = [](const void* q, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(q) % bytes == 0; };
  const bool aligned =
      on(master, 16) && on(grad, 16) && on(params_out, 16) && on(moments.m_codes, 8) && on(moments.v_codes, 8);
  const Step step{adam_element(p),       p.grad_scale,         p.grad_factor, moments.seed,
                  moments.first_element, 2 * uint64_t(p.step), aligned};
  adam_8bit_kernel<T><<<blocks_for(quantization_blocks(n), 1), kThreads, 0, stream>>>(
      master, grad, moments.m_codes, moments.v_codes, moments.m_scales, moments.v_scales, params_out, n,
      device_tables(), step);
  ZB_CUDA_CHECK_LAUNCH();
}

template void adam_8bit_step<float>(float*, const float*, const QuantizedMoments&, float*, int64_t,
                                    const OptimizerParams&, cudaStream_t);
template void adam_8bit_step<bf16>(float*, const bf16*, const QuantizedMoments&, bf16*, int64_t, const OptimizerParams&,
                                   cudaStream_t);
template void adam_8bit_step<f16>(float*, const f16*, const QuantizedMoments&, f16*, int64_t, const OptimizerParams&,
                                  cudaStream_t);

}  // namespace zb::cuda
