// Rotary position embedding, in place on the query and key heads of the fused qkv rows ("rotate half":
// element i pairs with i + head_dim/2). direction -1 applies the inverse rotation (the backward pass).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace zb::cuda {

namespace {

// Each thread rotates kVec consecutive pairs of one head: with kVec > 1, 16-byte vectors of each half (the
// launcher checks that they are aligned). The index arithmetic is done once per thread, not per element.
template <typename T, int kVec>
__global__ void rope_kernel(T* qkv, const float* inv_freq, AttentionShape s, int direction) {
  const int half = int(s.head_dim / 2), groups = half / kVec;
  const int64_t rotated_heads = s.heads + s.kv_heads;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.tokens() * rotated_heads * groups) return;
  const int64_t head_row = i / groups;  // token * rotated_heads + head
  const int first_pair = int(i - head_row * groups) * kVec;
  const int64_t token = head_row / rotated_heads, head = head_row - token * rotated_heads;
  // The angle is formed in fp32 as position * inv_freq, as the reference implementations do.
  const float position = float(token % s.seq);
  T* x = qkv + token * s.qkv_width() + head * s.head_dim + first_pair;
  float x1[kVec], x2[kVec];
  if constexpr (kVec > 1) {
    const Vec16<T> a = load16(x), b = load16(x + half);
#pragma unroll
    for (int k = 0; k < kVec; ++k) x1[k] = to_float(a.v[k]), x2[k] = to_float(b.v[k]);
  } else {
    x1[0] = to_float(x[0]), x2[0] = to_float(x[half]);
  }
  float y1[kVec], y2[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    float sn, c;
    sincosf(position * inv_freq[first_pair + k], &sn, &c);
    sn *= float(direction);
    y1[k] = x1[k] * c - x2[k] * sn;
    y2[k] = x2[k] * c + x1[k] * sn;
  }
  if constexpr (kVec > 1) {
    Vec16<T> a, b;
#pragma unroll
    for (int k = 0; k < kVec; ++k) a.v[k] = from_float<T>(y1[k]), b.v[k] = from_float<T>(y2[k]);
    store16(x, a);
    store16(x + half, b);
  } else {
    x[0] = from_float<T>(y1[0]), x[half] = from_float<T>(y2[0]);
  }
}

template <typename T, int kVec>
void launch_rope(T* qkv, const float* inv_freq, const AttentionShape& s, int direction, cudaStream_t stream) {
  const int64_t work = s.tokens() * (s.heads + s.kv_heads) * (s.head_dim / 2 / kVec);
  rope_kernel<T, kVec><<<blocks_for(work, 256), 256, 0, stream>>>(qkv, inv_freq, s, direction);
  ZB_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void rope_rotate(T* qkv, const float* inv_freq, const AttentionShape& s, int direction, cudaStream_t stream) {
  if (s.tokens() * (s.heads + s.kv_heads) * (s.head_dim / 2) == 0) return;
  constexpr int kVec = Vec16<T>::kSize;
  // Vectors need every half-head to start on a 16-byte boundary: the row width and the half a multiple of them.
  const bool vectorised =
      (s.head_dim / 2) % kVec == 0 && s.qkv_width() % kVec == 0 && reinterpret_cast<uintptr_t>(qkv) % 16 == 0;
  if (vectorised) return launch_rope<T, kVec>(qkv, inv_freq, s, direction, stream);
  launch_rope<T, 1>(qkv, inv_freq, s, direction, stream);
}

template void rope_rotate<float>(float*, const float*, const AttentionShape&, int, cudaStream_t);
template void rope_rotate<bf16>(bf16*, const float*, const AttentionShape&, int, cudaStream_t);
template void rope_rotate<f16>(f16*, const float*, const AttentionShape&, int, cudaStream_t);

}  // namespace zb::cuda
