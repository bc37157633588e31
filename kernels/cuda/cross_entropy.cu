// The fused classifier: softmax, per-token loss and the logit gradient in two passes over each row of
// logits. Pass 1 finds the row's max and sum of exponentials; pass 2 writes the gradient over the logits.
// Probabilities are never stored, so no [tokens, vocab] fp32 buffer exists.
// Where two rows fit in a block's shared memory (GPT-2's 50,304 bf16 logits: 98 KiB each) a persistent block
// an SM stages each row there, the next one arriving while this one is reduced: each logit crosses the memory
// bus once, in, and its gradient once, out. Wider rows (Llama 3's 128,256) take one block a row and read it
// twice from memory, the second time partly from L2.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/mma_tiles.cuh"

namespace zb::cuda {

namespace {

constexpr int kThreads = 512;

// exp as the kernels need it: the fast approximation in 16-bit runs (its error is far below bf16's or fp16's rounding), the
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

// exp(x - shift) for many x: in 16-bit runs one fused multiply-add and the hardware's approximate exp2 (its
// error is far below the 16-bit types' rounding); in fp32 runs exp_for's accurate expf.
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

// The largest of a vector's first `valid` values (all kVec of them for whole vectors: paired 16-bit maxima).
template <typename T>
__device__ __forceinline__ float vector_max(const Vec16<T>& v, int valid) {
  if constexpr (sizeof(T) == 2) {
    if (valid == Vec16<T>::kSize) {
      const auto* pairs = reinterpret_cast<const typename Pair<T>::type*>(v.v);
      const typename Pair<T>::type a = __hmax2(__hmax2(pairs[0], pairs[1]), __hmax2(pairs[2], pairs[3]));
      return fmaxf(__low2float(a), __high2float(a));
    }
  }
  float m = -FLT_MAX;
#pragma unroll
  for (int k = 0; k < Vec16<T>::kSize; ++k)
    if (k < valid) m = fmaxf(m, to_float(v.v[k]));
  return m;
}

// A vector of kVec floats as T: 16-bit pairs converted in one instruction each.
template <typename T>
__device__ __forceinline__ Vec16<T> vector_of(const float (&g)[Vec16<T>::kSize]) {
  Vec16<T> out;
  if constexpr (sizeof(T) == 2) {
    auto* pairs = reinterpret_cast<typename Pair<T>::type*>(out.v);
#pragma unroll
    for (int k = 0; k < Vec16<T>::kSize / 2; ++k) pairs[k] = Pair<T>::of(g[2 * k], g[2 * k + 1]);
  } else {
#pragma unroll
    for (int k = 0; k < Vec16<T>::kSize; ++k) out.v[k] = g[k];
  }
  return out;
}

// Rows staged in shared memory, two at a time: 16-byte vectors, padded_vocab % kVec == 0. One persistent
// block an SM walks rows blockIdx.x, blockIdx.x + gridDim.x, ...; while it reduces one row and writes its
// gradient, cp.async brings the next into the other buffer, so the SM's reads from memory do not wait for its
// arithmetic. (With one row a block and two blocks an SM, both of an SM's blocks were often past their loads at
// once, reducing and writing while nothing was read.)
// Each thread stages, and reads back, its own vectors, so only the loss's read of the target logit needs the
// barrier, which the reduction provides. Pass 1 takes the thread's maximum, then its sum of exponentials: one
// exponential per logit, no rescaling.
// The kernel is bound by instructions as much as by memory where every element is checked against the
// vocabulary and the target, so each pass walks the whole vectors without a check, then, continuing the same
// thread's stride, the one that straddles `vocab` and the padding with them; the target's gradient is written
// again afterwards by the thread that wrote its vector.
// The sum keeps one partial a vector lane (independent additions instead of a chain), and in 16-bit runs the
// gradient's scale is folded into the exponential's shift: exp(x - lse) * s = exp(x - (lse - log s)), s > 0.
template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    cross_entropy_staged_rows_kernel(const T* logits, const int32_t* targets, int64_t rows, int64_t padded_vocab,
                                     int64_t vocab, float* losses, T* dlogits, float grad_scale) {
  constexpr int kVec = Vec16<T>::kSize;
  constexpr bool kScaleInExponent = sizeof(T) == 2;  // fp32 runs keep the accurate exp and multiply
  extern __shared__ float4 shared_rows[];
  const int vectors = int(padded_vocab / kVec), whole = int(vocab / kVec), in_vocab = int(vocab);
  Vec16<T>* const buffers = reinterpret_cast<Vec16<T>*>(shared_rows);
  // Values of vector i inside the vocabulary, for i >= whole: fewer than kVec for the straddling one, then none.
  auto valid_after_whole = [&](int i) { return max(0, in_vocab - i * kVec); };
  auto stage = [&](int64_t r, Vec16<T>* buffer) {
    const Vec16<T>* const x = reinterpret_cast<const Vec16<T>*>(logits + r * padded_vocab);
    for (int i = threadIdx.x; i < vectors; i += kThreads) mma::cp_async_16(buffer + i, x + i, true);
  };
  int64_t r = blockIdx.x;
  stage(r, buffers);  // the grid has at most one block per row
  mma::cp_async_commit();
  for (int parity = 0; r < rows; r += gridDim.x, parity ^= 1) {
    Vec16<T>* const row = buffers + parity * vectors;
    // Every thread is done with the other buffer (the previous row's gradient) and the reduction's scratch.
    __syncthreads();
    if (r + gridDim.x < rows) stage(r + gridDim.x, buffers + (parity ^ 1) * vectors);
    mma::cp_async_commit();  // (an empty group after the last row keeps the count below right)
    mma::cp_async_wait<1>();  // this thread's copies of row r have landed
    float m = -FLT_MAX;
    int i = threadIdx.x;
#pragma unroll 4
    for (; i < whole; i += kThreads) m = fmaxf(m, vector_max(row[i], kVec));
    for (; i < vectors; i += kThreads) m = fmaxf(m, vector_max(row[i], valid_after_whole(i)));
    float lane_sums[kVec] = {};
    const ShiftedExp<T> from_max(m);
    i = threadIdx.x;
#pragma unroll 2
    for (; i < whole; i += kThreads) {
      const Vec16<T> v = row[i];
#pragma unroll
      for (int k = 0; k < kVec; ++k) lane_sums[k] += from_max(to_float(v.v[k]));
    }
    for (; i < vectors; i += kThreads) {
      const Vec16<T> v = row[i];
      const int n_valid = valid_after_whole(i);
#pragma unroll
      for (int k = 0; k < kVec; ++k)
        if (k < n_valid) lane_sums[k] += from_max(to_float(v.v[k]));
    }
#pragma unroll
    for (int width = kVec / 2; width > 0; width /= 2)
#pragma unroll
      for (int k = 0; k < width; ++k) lane_sums[k] += lane_sums[k + width];
    const MaxSum<T> total = block_max_sum(MaxSum<T>{m, lane_sums[0]});  // its barrier makes the whole row visible
    const float lse = total.m + logf(total.s);
    const int32_t target = targets[r];
    const int target_vector = target / kVec, target_lane = target % kVec;
    if (threadIdx.x == 0) losses[r] = lse - to_float(row[target_vector].v[target_lane]);
    if (!dlogits) continue;
    const ShiftedExp<T> probability(kScaleInExponent ? lse - logf(grad_scale) : lse);
    auto gradient = [&](float x) { return kScaleInExponent ? probability(x) : probability(x) * grad_scale; };
    Vec16<T>* const dx = reinterpret_cast<Vec16<T>*>(dlogits + r * padded_vocab);
    i = threadIdx.x;
#pragma unroll 2
    for (; i < whole; i += kThreads) {
      const Vec16<T> v = row[i];
      float g[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) g[k] = gradient(to_float(v.v[k]));
      dx[i] = vector_of<T>(g);
    }
    for (; i < vectors; i += kThreads) {
      const Vec16<T> v = row[i];
      const int n_valid = valid_after_whole(i);
      float g[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) g[k] = k < n_valid ? gradient(to_float(v.v[k])) : 0.0f;
      dx[i] = vector_of<T>(g);
    }
    // The target's (p - 1) * s, by the thread that wrote p * s there, so after it in program order.
    if (threadIdx.x == target_vector % kThreads)
      dlogits[r * padded_vocab + target] =
          from_float<T>(gradient(to_float(row[target_vector].v[target_lane])) - grad_scale);
  }
  mma::cp_async_wait<0>();  // nothing left in flight when the block exits
}

}  // namespace

template <typename T>
void cross_entropy(const T* logits, const int32_t* targets, int64_t n, int64_t padded_vocab, int64_t vocab,
                   float* losses, T* dlogits, float grad_scale, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kVec = Vec16<T>::kSize;
  const bool vectors = padded_vocab % kVec == 0 && vectorizable<T>(kVec, logits, dlogits ? dlogits : logits);
  const size_t staged_bytes = 2 * size_t(padded_vocab) * sizeof(T);  // two rows
  // The reduction's static scratch beside the two rows (GPT-2's 50,304 bf16 logits: 196.5 of 227 KiB).
  constexpr size_t kStaticShared = 1024;
  const DeviceLimits limits = vectors ? current_device_limits() : DeviceLimits{};
  // The staged kernel folds the gradient's scale into a logarithm; other scales (never in training) go the
  // general way.
  const bool positive_scale = !dlogits || (grad_scale > 0.0f && std::isfinite(grad_scale));
  if (vectors && positive_scale && staged_bytes + kStaticShared <= limits.shared_per_block) {
    auto* kernel = cross_entropy_staged_rows_kernel<T>;
    allow_dynamic_shared_memory(kernel, staged_bytes);
    const unsigned blocks = unsigned(std::min<int64_t>(n, limits.multiprocessors));
    kernel<<<blocks, kThreads, staged_bytes, stream>>>(logits, targets, n, padded_vocab, vocab, losses, dlogits,
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
template void cross_entropy<f16>(const f16*, const int32_t*, int64_t, int64_t, int64_t, float*, f16*, float,
                                 cudaStream_t);

}  // namespace zb::cuda
