// Rotary position embedding, in place on the query and key heads of the fused qkv rows ("rotate half":
// element i pairs with i + head_dim/2). direction -1 applies the inverse rotation (the backward pass).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace zb::cuda {

namespace {

template <typename T>
__global__ void rope_kernel(T* qkv, const float* inv_freq, AttentionShape s, int direction) {
  const int64_t half = s.head_dim / 2;
  const int64_t rotated_heads = s.heads + s.kv_heads;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.tokens() * rotated_heads * half) return;
  const int64_t pair = i % half, head = (i / half) % rotated_heads, token = i / (half * rotated_heads);
  // The angle is formed in fp32 as position * inv_freq, as the reference implementations do.
  const float angle = float(token % s.seq) * inv_freq[pair];
  float sn, c;
  sincosf(angle, &sn, &c);
  sn *= float(direction);
  T* x = qkv + token * s.qkv_width() + head * s.head_dim;
  const float x1 = to_float(x[pair]), x2 = to_float(x[pair + half]);
  x[pair] = from_float<T>(x1 * c - x2 * sn);
  x[pair + half] = from_float<T>(x2 * c + x1 * sn);
}

}  // namespace

template <typename T>
void rope_rotate(T* qkv, const float* inv_freq, const AttentionShape& s, int direction, cudaStream_t stream) {
  const int64_t work = s.tokens() * (s.heads + s.kv_heads) * (s.head_dim / 2);
  if (work == 0) return;
  rope_kernel<<<blocks_for(work, 256), 256, 0, stream>>>(qkv, inv_freq, s, direction);
  ZB_CUDA_CHECK_LAUNCH();
}

template void rope_rotate<float>(float*, const float*, const AttentionShape&, int, cudaStream_t);
template void rope_rotate<bf16>(bf16*, const float*, const AttentionShape&, int, cudaStream_t);

}  // namespace zb::cuda
