// The fused classifier: softmax, per-token loss and the logit gradient in two passes over each row of
// logits, one block per row. Pass 1 finds the row's max and sum of exponentials; pass 2 writes the gradient
// over the logits. Probabilities are never stored, so no [tokens, vocab] fp32 buffer exists.
// On Hopper a row is spread over a cluster of blocks that keep it in shared memory between the passes
// (cross_entropy_cluster_kernel); elsewhere one block reads its row twice, the second time partly from L2.
#include <cooperative_groups.h>

#include <cfloat>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace zb::cuda {

namespace {

constexpr int kThreads = 512;

// exp for the gradient: the fast approximation in bf16 runs (its error is far below bf16's rounding), the
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

// One row per cluster of kClusterBlocks blocks (Hopper): block q of the cluster stages slice q of the row in its
// shared memory, finds the slice's max and sum of exponentials, and the blocks exchange these through
// distributed shared memory, each combining all of them in rank order (the same bits in every block). Each
// then writes its slice's gradient from shared memory. So each logit crosses the memory bus once, in, and its
// gradient once, out; and a row is spread over many small blocks, so an SM holds several rows at different
// phases and one's loads overlap another's arithmetic. Rows are whole 16-byte vectors (kVec values).
constexpr int kClusterBlocks = 8;
constexpr int kClusterThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kClusterThreads, 8)  // 8 blocks an SM: 32 registers, no spills
    cross_entropy_cluster_kernel(const T* logits, const int32_t* targets, int64_t padded_vocab, int64_t vocab,
                                 int slice_vectors, float* losses, T* dlogits, float grad_scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kVec = Vec16<T>::kSize;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  extern __shared__ float4 shared_slice[];
  Vec16<T>* const slice = reinterpret_cast<Vec16<T>*>(shared_slice);
  __shared__ float2 slice_stats;  // this block's (max, sum of exp(x - max)), read by the whole cluster
  __shared__ float warp_m[kClusterThreads / 32], warp_s[kClusterThreads / 32];

  const int64_t r = blockIdx.x / kClusterBlocks;
  const int q = int(cluster.block_rank());
  const int64_t vectors = padded_vocab / kVec, first = int64_t(q) * slice_vectors;
  const int64_t left = vectors - first;  // this block's vectors: slice_vectors, fewer in the last, or none
  const int count = int(left <= 0 ? 0 : left < slice_vectors ? left : slice_vectors);
  const Vec16<T>* const x = reinterpret_cast<const Vec16<T>*>(logits + r * padded_vocab) + first;
  auto valid = [&](int i, int k) { return (first + i) * kVec + k < vocab; };

  float m = -FLT_MAX;
#pragma unroll 4
  for (int i = threadIdx.x; i < count; i += kClusterThreads) {
    const Vec16<T> v = x[i];
    slice[i] = v;
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      if (valid(i, k)) m = fmaxf(m, to_float(v.v[k]));
  }
  float s = 0.0f;
  for (int i = threadIdx.x; i < count; i += kClusterThreads) {  // the vectors this thread stored
    const Vec16<T> v = slice[i];
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      if (valid(i, k)) s += exp_for<T>(to_float(v.v[k]) - m);
  }
  MaxSum<T> local{m, s};
  for (int offset = 16; offset > 0; offset >>= 1)
    local.merge({__shfl_xor_sync(0xffffffffu, local.m, offset), __shfl_xor_sync(0xffffffffu, local.s, offset)});
  if (threadIdx.x % 32 == 0) warp_m[threadIdx.x / 32] = local.m, warp_s[threadIdx.x / 32] = local.s;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum<T> block;
    for (int w = 0; w < kClusterThreads / 32; ++w) block.merge({warp_m[w], warp_s[w]});
    slice_stats = make_float2(block.m, block.s);
  }
  cluster.sync();  // every block's slice_stats is written
  MaxSum<T> row;
  for (int b = 0; b < kClusterBlocks; ++b) {
    const float2 other = *cluster.map_shared_rank(&slice_stats, b);
    row.merge({other.x, other.y});
  }
  cluster.sync();  // no block leaves (taking its shared memory) while another still reads it
  const float lse = row.m + logf(row.s);
  const int32_t target = targets[r];
  const int64_t target_vector = target / kVec - first;
  if (threadIdx.x == 0 && target_vector >= 0 && target_vector < count)
    losses[r] = lse - to_float(slice[target_vector].v[target % kVec]);
  if (!dlogits) return;
  Vec16<T>* const dx = reinterpret_cast<Vec16<T>*>(dlogits + r * padded_vocab) + first;
  for (int i = threadIdx.x; i < count; i += kClusterThreads) {
    const Vec16<T> v = slice[i];
    Vec16<T> out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float p = valid(i, k) ? exp_for<T>(to_float(v.v[k]) - lse) : 0.0f;
      out.v[k] = from_float<T>((i == target_vector && k == target % kVec ? p - 1.0f : p) * grad_scale);
    }
    dx[i] = out;
  }
#else
  __trap();  // launched only on compute capability 9.0 and newer
#endif
}

// Shared memory a block of a cluster may take for its slice without opting in to more.
constexpr size_t kClusterSliceLimit = 48 * 1024;

bool clusters_available() {
  int device = 0, major = 0;
  ZB_CUDA_CHECK(cudaGetDevice(&device));
  ZB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9;
}

template <typename T>
void launch_cross_entropy_cluster(const T* logits, const int32_t* targets, int64_t n, int64_t padded_vocab,
                                  int64_t vocab, int slice_vectors, float* losses, T* dlogits, float grad_scale,
                                  cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(n * kClusterBlocks));
  config.blockDim = dim3(kClusterThreads);
  config.dynamicSmemBytes = size_t(slice_vectors) * 16;
  config.stream = stream;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = kClusterBlocks;
  cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  ZB_CUDA_CHECK(cudaLaunchKernelEx(&config, cross_entropy_cluster_kernel<T>, logits, targets, padded_vocab, vocab,
                                   slice_vectors, losses, dlogits, grad_scale));
}

}  // namespace

template <typename T>
void cross_entropy(const T* logits, const int32_t* targets, int64_t n, int64_t padded_vocab, int64_t vocab,
                   float* losses, T* dlogits, float grad_scale, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kVec = Vec16<T>::kSize;
  const bool vectors = padded_vocab % kVec == 0 && vectorizable<T>(kVec, logits, dlogits ? dlogits : logits);
  const int64_t slice_vectors = (padded_vocab / kVec + kClusterBlocks - 1) / kClusterBlocks;
  if (vectors && size_t(slice_vectors) * 16 <= kClusterSliceLimit && n <= 0x7fffffff / kClusterBlocks &&
      clusters_available()) {
    launch_cross_entropy_cluster(logits, targets, n, padded_vocab, vocab, int(slice_vectors), losses, dlogits,
                                 grad_scale, stream);
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
