// The fused classifier: softmax, per-token loss and the logit gradient in two passes over each row of
// logits, one block per row. Pass 1 finds the row's max and sum of exponentials; pass 2 writes the gradient
// over the logits. Probabilities are never stored, so no [tokens, vocab] fp32 buffer exists.
// Where a row fits in shared memory (GPT-2's 50,304 bf16 logits: 98 KiB, two blocks an SM) pass 1 keeps it
// there and pass 2 reads it back from there: each logit crosses the memory bus once, in, and its gradient
// once, out. Wider rows (Llama 3's 128,256) read the row twice from memory, the second time partly from L2.
#include <cfloat>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace zb::cuda {

namespace {

constexpr int kThreads = 512;

// exp as the kernels need it: the fast approximation in bf16 runs (its error is far below bf16's rounding), the
// accurate one in fp32 runs, whose rows of 10^5 logits the approximation would miss by 1e-5.
template <typename T>
__device__ __forceinline__ float exp_for(float x) {
  if constexpr (sizeof(T) == 2) return __expf(x);
  else return expf(x);
}

// Online softmax state: max m and sum of exp(x - m).
template <typename T>
struct MaxSum {
  float m = -FLT_MAX, s = 0.0f;
  __device__ void add(float x) {
    if (x > m) {
      s = s * exp_for<T>(m - x) + 1.0f;
      m = x;
    } else {
      s += exp_for<T>(x - m);
    }
  }
  __device__ void merge(MaxSum o) {
    const float nm = fmaxf(m, o.m);
    s = s * exp_for<T>(m - nm) + o.s * exp_for<T>(o.m - nm);
    m = nm;
  }
};

template <typename T>
__device__ MaxSum<T> block_max_sum(MaxSum<T> local) {
  __shared__ float ms[kThreads / 32], ss[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum<T> other{__shfl_xor_sync(0xffffffffu, local.m, offset), __shfl_xor_sync(0xffffffffu, local.s, offset)};
    local.merge(other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) ms[warp] = local.m, ss[warp] = local.s;
  __syncthreads();
  MaxSum<T> total;
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
  MaxSum<T> local;
  for (int64_t j = int64_t(threadIdx.x) * kVec; j < vocab; j += int64_t(kThreads) * kVec) {
    float v[kVec];
    load(j, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      if (j + k < vocab) local.add(v[k]);
  }
  const MaxSum<T> total = block_max_sum(local);
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
      const float g = col < vocab ? (exp_for<T>(v[k] - lse) - (col == target ? 1.0f : 0.0f)) * grad_scale : 0.0f;
      if constexpr (kVec == 1) {
        dx[col] = from_float<T>(g);
      } else {
        packed.v[k] = from_float<T>(g);
      }
    }
    if constexpr (kVec > 1) store16(dx + j, packed);
  }
}

// exp(x - shift) for many x: in bf16 runs one fused multiply-add and the hardware's approximate exp2 (its
// error is far below bf16's rounding); in fp32 runs exp_for's accurate expf.
template <typename T>
struct ShiftedExp {
  static constexpr float kLog2e = 1.4426950408889634f;
  float shift, scaled_shift;
  __device__ explicit ShiftedExp(float s) : shift(s), scaled_shift(s * kLog2e) {}
  __device__ float operator()(float x) const {
    if constexpr (sizeof(T) == 2) {
      float y;
      asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(fmaf(x, kLog2e, -scaled_shift)));
      return y;
    } else {
      return exp_for<T>(x - shift);
    }
  }
};

// The largest of a vector's first `valid` values (all kVec of them for whole vectors: paired bf16 maxima).
template <typename T>
__device__ __forceinline__ float vector_max(const Vec16<T>& v, int valid) {
  if constexpr (sizeof(T) == 2) {
    if (valid == Vec16<T>::kSize) {
      const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(v.v);
      const __nv_bfloat162 a = __hmax2(__hmax2(pairs[0], pairs[1]), __hmax2(pairs[2], pairs[3]));
      return fmaxf(__low2float(a), __high2float(a));
    }
  }
  float m = -FLT_MAX;
#pragma unroll
  for (int k = 0; k < Vec16<T>::kSize; ++k)
    if (k < valid) m = fmaxf(m, to_float(v.v[k]));
  return m;
}

// The row staged in shared memory: 16-byte vectors, padded_vocab % kVec == 0. Each thread reads back only the
// vectors it stored, so pass 2 needs no barrier beyond the reduction's. Pass 1 takes the thread's maximum
// first, then its sum of exponentials: one exponential per logit, no rescaling. The kernel is bound by
// instructions as much as by memory (ncu: 83% of the SM's issue rate with per-element index checks), so
// whole vectors skip the checks: only the vector that straddles `vocab`, the padding after it and the
// target's vector take the element-wise path.
template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    cross_entropy_shared_row_kernel(const T* logits, const int32_t* targets, int64_t padded_vocab, int64_t vocab,
                                    float* losses, T* dlogits, float grad_scale) {
  constexpr int kVec = Vec16<T>::kSize;
  extern __shared__ float4 shared_row[];
  Vec16<T>* const row = reinterpret_cast<Vec16<T>*>(shared_row);
  const int64_t r = blockIdx.x;
  const Vec16<T>* const x = reinterpret_cast<const Vec16<T>*>(logits + r * padded_vocab);
  const int vectors = int(padded_vocab / kVec), whole = int(vocab / kVec), in_vocab = int(vocab);
  // Values of vector i inside the vocabulary: kVec, fewer for the straddling one, none after it.
  auto valid = [&](int i) { return i < whole ? kVec : max(0, in_vocab - i * kVec); };
  float m = -FLT_MAX;
#pragma unroll 4
  for (int i = threadIdx.x; i < vectors; i += kThreads) {
    const Vec16<T> v = x[i];
    row[i] = v;
    m = fmaxf(m, vector_max(v, valid(i)));
  }
  float s = 0.0f;
  const ShiftedExp<T> from_max(m);
  for (int i = threadIdx.x; i < vectors; i += kThreads) {
    const Vec16<T> v = row[i];
    const int n_valid = valid(i);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      if (k < n_valid) s += from_max(to_float(v.v[k]));
  }
  const MaxSum<T> total = block_max_sum(MaxSum<T>{m, s});
  const float lse = total.m + logf(total.s);
  const int32_t target = targets[r];
  const int target_vector = target / kVec, target_lane = target % kVec;
  if (threadIdx.x == 0) losses[r] = lse - to_float(row[target_vector].v[target_lane]);
  if (!dlogits) return;
  const ShiftedExp<T> probability(lse);
  Vec16<T>* const dx = reinterpret_cast<Vec16<T>*>(dlogits + r * padded_vocab);
  for (int i = threadIdx.x; i < vectors; i += kThreads) {
    const Vec16<T> v = row[i];
    const int n_valid = valid(i);
    float g[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) g[k] = k < n_valid ? probability(to_float(v.v[k])) : 0.0f;
    if (i == target_vector) {
#pragma unroll
      for (int k = 0; k < kVec; ++k)
        if (k == target_lane) g[k] -= 1.0f;
    }
    Vec16<T> out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) out.v[k] = from_float<T>(g[k] * grad_scale);
    dx[i] = out;
  }
}

// Shared memory a block may take for its row: two blocks fit on an SM of an H100 or H200 (228 KiB).
constexpr size_t kSharedRowLimit = 112 * 1024;

}  // namespace

template <typename T>
void cross_entropy(const T* logits, const int32_t* targets, int64_t n, int64_t padded_vocab, int64_t vocab,
                   float* losses, T* dlogits, float grad_scale, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kVec = Vec16<T>::kSize;
  const bool vectors = padded_vocab % kVec == 0 && vectorizable<T>(kVec, logits, dlogits ? dlogits : logits);
  const size_t row_bytes = size_t(padded_vocab) * sizeof(T);
  if (vectors && row_bytes <= kSharedRowLimit) {
    auto* kernel = cross_entropy_shared_row_kernel<T>;
    ZB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSharedRowLimit)));
    kernel<<<unsigned(n), kThreads, row_bytes, stream>>>(logits, targets, padded_vocab, vocab, losses, dlogits,
                                                         grad_scale);
  } else if (vectors) {
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
