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

// The index of the first sorted value above x (256 where none is): a binary search of the table in shared
// memory. (count_at_or_below's estimate, with its tables indexed by the decade, measured 4x slower here: 66.7 ms
// for gpt2-xl's update on an H100 against 38 ms, its small arrays in local memory.)
__device__ int upper_index(const MapTables& t, float x) {
  int lo = 0, hi = 256;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (t.sorted[mid] <= x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// DynamicMap::nearest and round_stochastically, on a map's tables in shared memory.
__device__ uint8_t nearest_code(const MapTables& t, float x) {
  // The nearer of the first value above x and the one below; a tie goes to the lower, as on the host.
  const int lo = upper_index(t, x);
  if (lo == 0) return t.codes[0];
  if (lo == 256) return t.codes[255];
  const float below = t.sorted[lo - 1], above = t.sorted[lo];
  return x <= 0.5f * (below + above) ? t.codes[lo - 1] : t.codes[lo];
}

__device__ uint8_t stochastic_code(const MapTables& t, float x, float u) {
  const int lo = upper_index(t, x);
  if (lo == 0) return t.codes[0];
  if (lo == 256) return t.codes[255];
  const float share = (x - t.sorted[lo - 1]) / (t.sorted[lo] - t.sorted[lo - 1]);
  return u < share ? t.codes[lo] : t.codes[lo - 1];
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
};

template <typename T>
__global__ void __launch_bounds__(kThreads) adam_8bit_kernel(float* master, const T* grad, uint8_t* m_codes,
                                                             uint8_t* v_codes, float* m_scales, float* v_scales,
                                                             T* params_out, int64_t n, const Tables* tables,
                                                             Step step) {
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
  const float m_scale = m_scales[block], v_scale = v_scales[block];
  float m[kPerThread], v[kPerThread];
  float m_peak = 0.0f, v_peak = 0.0f;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = first + k;
    m[k] = v[k] = 0.0f;
    if (i >= n) continue;
    m[k] = t.first.values[m_codes[i]] * m_scale;
    v[k] = t.second.values[v_codes[i]] * v_scale;
    const float p = step.adam(master[i], to_float(grad[i]) * grad_scale, m[k], v[k]);
    master[i] = p;
    if (params_out) params_out[i] = from_float<T>(p);
    m_peak = fmaxf(m_peak, fabsf(m[k]));
    v_peak = fmaxf(v_peak, fabsf(v[k]));
  }
  const float new_m_scale = block_max(m_peak, scratch), new_v_scale = block_max(v_peak, scratch);
  const float m_inverse = new_m_scale > 0 ? 1.0f / new_m_scale : 0.0f;
  const float v_inverse = new_v_scale > 0 ? 1.0f / new_v_scale : 0.0f;
  for (int half = 0; half < kPerThread / 4; ++half) {
    const uint64_t element = step.first_element + uint64_t(first + 4 * half);
    const auto m_words = random_words(step.seed, step.stream, element / 4);
    const auto v_words = random_words(step.seed, step.stream + 1, element / 4);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int j = 4 * half + k;
      const int64_t i = first + j;
      if (i >= n) continue;
      const float um = rounding_uniform(m_words[k]), uv = rounding_uniform(v_words[k]);
      const float xm = m[j] * m_inverse, xv = v[j] * v_inverse;
      m_codes[i] = fabsf(m[j]) == new_m_scale ? nearest_code(t.first, xm) : stochastic_code(t.first, xm, um);
      v_codes[i] = fabsf(v[j]) == new_v_scale ? nearest_code(t.second, xv) : stochastic_code(t.second, xv, uv);
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
  const Step step{adam_element(p), p.grad_scale, p.grad_factor, moments.seed, moments.first_element,
                  2 * uint64_t(p.step)};
  adam_8bit_kernel<T><<<blocks_for(quantization_blocks(n), 1), kThreads, 0, stream>>>(
      master, grad, moments.m_codes, moments.v_codes, moments.m_scales, moments.v_scales, params_out, n,
      device_tables(), step);
  ZB_CUDA_CHECK_LAUNCH();
}

template void adam_8bit_step<float>(float*, const float*, const QuantizedMoments&, float*, int64_t,
                                    const OptimizerParams&, cudaStream_t);
template void adam_8bit_step<bf16>(float*, const bf16*, const QuantizedMoments&, bf16*, int64_t,
                                   const OptimizerParams&, cudaStream_t);
template void adam_8bit_step<f16>(float*, const f16*, const QuantizedMoments&, f16*, int64_t, const OptimizerParams&,
                                  cudaStream_t);

}  // namespace zb::cuda
