// The fused classifier: softmax, per-token loss and the logit gradient in two passes over each row of
// logits, one block per row. Pass 1 finds the row's max and sum of exponentials online; pass 2 writes the
// gradient over the logits. Probabilities are never stored, so no [tokens, vocab] fp32 buffer exists.
#include <cfloat>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace zb::cuda {

namespace {

constexpr int kThreads = 512;

// Online softmax state: max m and sum of exp(x - m).
struct MaxSum {
  float m = -FLT_MAX, s = 0.0f;
  __device__ void add(float x) {
    if (x > m) {
      s = s * __expf(m - x) + 1.0f;
      m = x;
    } else {
      s += __expf(x - m);
    }
  }
  __device__ void merge(MaxSum o) {
    const float nm = fmaxf(m, o.m);
    s = s * __expf(m - nm) + o.s * __expf(o.m - nm);
    m = nm;
  }
};

__device__ MaxSum block_max_sum(MaxSum local) {
  __shared__ float ms[kThreads / 32], ss[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, local.m, offset), __shfl_xor_sync(0xffffffffu, local.s, offset)};
    local.merge(other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) ms[warp] = local.m, ss[warp] = local.s;
  __syncthreads();
  MaxSum total;
  for (int w = 0; w < kThreads / 32; ++w) total.merge({ms[w], ss[w]});  // same order in every thread
  return total;
}

// kVec elements per thread per step: 16-byte loads when the rows allow (kVec = 16 / sizeof(T)), else 1.
template <typename T, int kVec>
__global__ void cross_entropy_kernel(const T* logits, const int32_t* targets, int64_t padded_vocab, int64_t vocab,
                                     float* losses, T* dlogits, float grad_scale) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * padded_vocab;
  auto load = [&](int64_t j, float (&v)[kVec]) {
    if constexpr (kVec == 1) {
      v[0] = to_float(x[j]);
    } else {
      const Vec16<T> packed = load16(x + j);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] = to_float(packed.v[k]);
    }
  };
  MaxSum local;
  for (int64_t j = int64_t(threadIdx.x) * kVec; j < vocab; j += int64_t(kThreads) * kVec) {
    float v[kVec];
    load(j, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      if (j + k < vocab) local.add(v[k]);
  }
  const MaxSum total = block_max_sum(local);
  const float lse = total.m + logf(total.s);
  const int32_t target = targets[row];
  if (threadIdx.x == 0) losses[row] = lse - to_float(x[target]);
  if (!dlogits) return;
  __syncthreads();  // every thread has read the target logit before any overwrites it
  T* dx = dlogits + row * padded_vocab;
  for (int64_t j = int64_t(threadIdx.x) * kVec; j < padded_vocab; j += int64_t(kThreads) * kVec) {
    float v[kVec];
    load(j, v);
    Vec16<T> packed;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int64_t col = j + k;
      const float g = col < vocab ? (__expf(v[k] - lse) - (col == target ? 1.0f : 0.0f)) * grad_scale : 0.0f;
      if constexpr (kVec == 1) {
        dx[col] = from_float<T>(g);
      } else {
        packed.v[k] = from_float<T>(g);
      }
    }
    if constexpr (kVec > 1) store16(dx + j, packed);
  }
}

}  // namespace

template <typename T>
void cross_entropy(const T* logits, const int32_t* targets, int64_t n, int64_t padded_vocab, int64_t vocab,
                   float* losses, T* dlogits, float grad_scale, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kVec = Vec16<T>::kSize;
  if (padded_vocab % kVec == 0 && vectorizable<T>(kVec, logits, dlogits ? dlogits : logits)) {
    cross_entropy_kernel<T, kVec>
        <<<unsigned(n), kThreads, 0, stream>>>(logits, targets, padded_vocab, vocab, losses, dlogits, grad_scale);
  } else {
    cross_entropy_kernel<T, 1>
        <<<unsigned(n), kThreads, 0, stream>>>(logits, targets, padded_vocab, vocab, losses, dlogits, grad_scale);
  }
  ZB_CUDA_CHECK_LAUNCH();
}

template void cross_entropy<float>(const float*, const int32_t*, int64_t, int64_t, int64_t, float*, float*, float,
                                   cudaStream_t);
template void cross_entropy<bf16>(const bf16*, const int32_t*, int64_t, int64_t, int64_t, float*, bf16*, float,
                                  cudaStream_t);

}  // namespace zb::cuda
