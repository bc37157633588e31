// Per-head RMSNorm of the query and key heads of the fused qkv rows (Gemma 3's q_norm and k_norm), forward and
// backward. One warp a head of a token: the head's sum of squares (forward) or of dnorm * xhat (backward) is a warp
// sum, as in the norms' warp kernels (normalization.cu); value heads are copied by their warps. The gains'
// gradients go through the deterministic column reduction over the (token, head) rows of each kind.
#include "kernels/cuda/column_reduce.cuh"

namespace zb::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

// Head `head` of token `token`: query heads first, then key heads (the normalised ones), then value heads.
struct HeadRow {
  int64_t token, head;
  __device__ int64_t at(const AttentionShape& s) const { return token * s.qkv_width() + head * s.head_dim; }
};

// The warp's head, or head -1 past the last one.
__device__ __forceinline__ HeadRow warp_head(const AttentionShape& s) {
  const int64_t heads = s.heads + 2 * s.kv_heads;
  const int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (item >= s.tokens() * heads) return {0, -1};
  return {item / heads, item % heads};
}

template <typename T>
__global__ void qk_norm_forward_kernel(const T* in, const T* q_weight, const T* k_weight, float eps, float gain_offset,
                                       AttentionShape s, T* out, float* rstd) {
  const HeadRow h = warp_head(s);
  if (h.head < 0) return;
  const int lane = int(threadIdx.x % 32);
  const int64_t d = s.head_dim, at = h.at(s), normed = s.heads + s.kv_heads;
  if (h.head >= normed) {  // a value head: copied
    for (int64_t j = lane; j < d; j += 32) out[at + j] = in[at + j];
    return;
  }
  const T* weight = h.head < s.heads ? q_weight : k_weight;
  float sq = 0.0f;
  for (int64_t j = lane; j < d; j += 32) {
    const float x = to_float(in[at + j]);
    sq += x * x;
  }
  const float rs = rsqrtf(warp_sum(sq) / float(d) + eps);
  for (int64_t j = lane; j < d; j += 32) {
    out[at + j] = from_float<T>(to_float(in[at + j]) * rs * (gain_offset + to_float(weight[j])));
  }
  if (lane == 0) rstd[h.token * normed + h.head] = rs;
}

// dx = rstd * (dnorm - xhat * mean(dnorm * xhat)), dnorm = dout * gain, xhat = x * rstd; value heads: dx = dout.
template <typename T>
__global__ void qk_norm_backward_kernel(const T* dout, const T* in, const T* q_weight, const T* k_weight,
                                        const float* rstd, float gain_offset, AttentionShape s, T* dx) {
  const HeadRow h = warp_head(s);
  if (h.head < 0) return;
  const int lane = int(threadIdx.x % 32);
  const int64_t d = s.head_dim, at = h.at(s), normed = s.heads + s.kv_heads;
  if (h.head >= normed) {
    for (int64_t j = lane; j < d; j += 32) dx[at + j] = dout[at + j];
    return;
  }
  const T* weight = h.head < s.heads ? q_weight : k_weight;
  const float rs = rstd[h.token * normed + h.head];
  float sum = 0.0f;
  for (int64_t j = lane; j < d; j += 32) {
    sum += to_float(dout[at + j]) * (gain_offset + to_float(weight[j])) * to_float(in[at + j]) * rs;
  }
  const float mean_dnorm_xhat = warp_sum(sum) / float(d);
  for (int64_t j = lane; j < d; j += 32) {
    const float dnorm = to_float(dout[at + j]) * (gain_offset + to_float(weight[j]));
    dx[at + j] = from_float<T>(rs * (dnorm - to_float(in[at + j]) * rs * mean_dnorm_xhat));
  }
}

// The gain gradient's terms dout * xhat over the rows (token, first_head + i) for i < heads: row r is token
// r / heads. A row starts 16-byte aligned where head_dim is a multiple of 8 and the tensors are aligned.
template <typename T>
struct HeadGainTerms {
  const T* dout;
  const T* x;
  const float* rstd;
  AttentionShape s;
  int64_t first_head, heads;

  __device__ int64_t offset(int64_t row) const { return HeadRow{row / heads, first_head + row % heads}.at(s); }
  __device__ float rs(int64_t row) const {
    return rstd[(row / heads) * (s.heads + s.kv_heads) + first_head + row % heads];
  }
  __device__ void vec8(int64_t row, int64_t col0, float (&a)[8], float (&)[8]) const {
    float g[8], xv[8];
    const int64_t at = offset(row) + col0;
    load8(dout + at, g);
    load8(x + at, xv);
    const float r = rs(row);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] += g[k] * xv[k] * r;
  }
  __device__ float2 one(int64_t row, int64_t col) const {
    const int64_t at = offset(row) + col;
    return make_float2(to_float(dout[at]) * to_float(x[at]) * rs(row), 0.0f);
  }
};

}  // namespace

template <typename T>
void qk_norm_forward(const T* qkv_in, const T* q_weight, const T* k_weight, float eps, float gain_offset,
                     const AttentionShape& s, T* qkv_out, float* rstd, cudaStream_t stream) {
  const int64_t work = s.tokens() * (s.heads + 2 * s.kv_heads);
  if (work == 0) return;
  qk_norm_forward_kernel<T><<<blocks_for(work, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
      qkv_in, q_weight, k_weight, eps, gain_offset, s, qkv_out, rstd);
  ZB_CUDA_CHECK_LAUNCH();
}

size_t qk_norm_backward_scratch(const AttentionShape& s) {
  return column_reduce_scratch(s.tokens() * std::max(s.heads, s.kv_heads), s.head_dim);
}

template <typename T>
void qk_norm_backward(const T* dout, const T* qkv_in, const T* q_weight, const T* k_weight, const float* rstd,
                      float gain_offset, const AttentionShape& s, T* dqkv_in, T* dq_weight, T* dk_weight,
                      bool accumulate, Scratch scratch, cudaStream_t stream) {
  const int64_t work = s.tokens() * (s.heads + 2 * s.kv_heads);
  if (work == 0) return;
  qk_norm_backward_kernel<T><<<blocks_for(work, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
      dout, qkv_in, q_weight, k_weight, rstd, gain_offset, s, dqkv_in);
  ZB_CUDA_CHECK_LAUNCH();
  // The two reductions share the scratch one after the other on the stream.
  const bool aligned = s.head_dim % 8 == 0 && vectorizable<T>(8, dout, qkv_in);
  if (dq_weight) {
    column_reduce<T>(s.tokens() * s.heads, s.head_dim, aligned, HeadGainTerms<T>{dout, qkv_in, rstd, s, 0, s.heads},
                     dq_weight, static_cast<T*>(nullptr), accumulate, scratch, stream);
  }
  if (dk_weight) {
    column_reduce<T>(s.tokens() * s.kv_heads, s.head_dim, aligned,
                     HeadGainTerms<T>{dout, qkv_in, rstd, s, s.heads, s.kv_heads}, dk_weight, static_cast<T*>(nullptr),
                     accumulate, scratch, stream);
  }
}

#define ZB_INSTANTIATE(T)                                                                                         \
  template void qk_norm_forward<T>(const T*, const T*, const T*, float, float, const AttentionShape&, T*, float*, \
                                   cudaStream_t);                                                                 \
  template void qk_norm_backward<T>(const T*, const T*, const T*, const T*, const float*, float,                  \
                                    const AttentionShape&, T*, T*, T*, bool, Scratch, cudaStream_t);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(bf16)
ZB_INSTANTIATE(f16)

}  // namespace zb::cuda
