// Causal attention on CUDA cores, one warp per query row (forward, dQ) or key row (dK, dV), lanes across the
// head dimension; each query row walks only its sliding window's keys (AttentionShape::first_key), each key row
// only the queries whose window holds it (last_query). Any head size up to 256 and any dtype; used for fp32 and
// for head sizes the flash kernels do not cover. Straightforward rather than fast.
#pragma once

#include "kernels/attention_shape.h"
#include "kernels/cuda/cuda_common.cuh"

namespace zb::cuda {

constexpr int kSimpleMaxDimPerLane = 8;  // head_dim <= 256

struct AttentionIndex {
  AttentionShape s;
  __device__ int64_t q(int64_t b, int64_t t, int64_t h) const { return (b * s.seq + t) * s.qkv_width() + h * s.head_dim; }
  __device__ int64_t k(int64_t b, int64_t t, int64_t kvh) const {
    return (b * s.seq + t) * s.qkv_width() + s.q_width() + kvh * s.head_dim;
  }
  __device__ int64_t v(int64_t b, int64_t t, int64_t kvh) const { return k(b, t, kvh) + s.kv_width(); }
  __device__ int64_t o(int64_t b, int64_t t, int64_t h) const { return (b * s.seq + t) * s.q_width() + h * s.head_dim; }
  __device__ int64_t row(int64_t b, int64_t h, int64_t t) const { return (b * s.heads + h) * s.seq + t; }
};

// sum over the head dimension of a[d] * b[d], lanes striding d.
template <typename T>
__device__ float warp_dot(const T* a, const T* b, int64_t d, int lane) {
  float acc = 0.0f;
  for (int64_t i = lane; i < d; i += 32) acc += to_float(a[i]) * to_float(b[i]);
  return warp_sum(acc);
}

template <typename T>
__global__ void simple_attention_forward_kernel(const T* qkv, AttentionShape s, T* out, float* lse, float scale) {
  const AttentionIndex ix{s};
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= s.batch * s.heads * s.seq) return;
  const int64_t t = row % s.seq, h = (row / s.seq) % s.heads, b = row / (s.seq * s.heads);
  const int64_t kvh = h / s.group_size();
  float o[kSimpleMaxDimPerLane] = {};
  float m = -INFINITY, l = 0.0f;
  for (int64_t u = s.first_key(t); u <= t; ++u) {
    const float score = warp_dot(qkv + ix.q(b, t, h), qkv + ix.k(b, u, kvh), s.head_dim, lane) * scale;
    const float m_new = fmaxf(m, score), alpha = expf(m - m_new), p = expf(score - m_new);
    l = l * alpha + p;
    const T* v = qkv + ix.v(b, u, kvh);
    for (int i = 0; i < kSimpleMaxDimPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < s.head_dim) o[i] = o[i] * alpha + p * to_float(v[d]);
    }
    m = m_new;
  }
  for (int i = 0; i < kSimpleMaxDimPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < s.head_dim) out[ix.o(b, t, h) + d] = from_float<T>(o[i] / l);
  }
  if (lane == 0) lse[ix.row(b, h, t)] = m + logf(l);
}

// delta[row] = dot(dout, out) for each query row: the softmax backward's correction term.
template <typename T>
__global__ void attention_delta_kernel(const T* dout, const T* out, AttentionShape s, float* delta) {
  const AttentionIndex ix{s};
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= s.batch * s.heads * s.seq) return;
  const int64_t t = row % s.seq, h = (row / s.seq) % s.heads, b = row / (s.seq * s.heads);
  const float d = warp_dot(dout + ix.o(b, t, h), out + ix.o(b, t, h), s.head_dim, lane);
  if (lane == 0) delta[ix.row(b, h, t)] = d;
}

template <typename T>
__global__ void simple_attention_dq_kernel(const T* dout, const T* qkv, const float* lse, const float* delta,
                                           AttentionShape s, T* dqkv, float scale) {
  const AttentionIndex ix{s};
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= s.batch * s.heads * s.seq) return;
  const int64_t t = row % s.seq, h = (row / s.seq) % s.heads, b = row / (s.seq * s.heads);
  const int64_t kvh = h / s.group_size();
  float dq[kSimpleMaxDimPerLane] = {};
  for (int64_t u = s.first_key(t); u <= t; ++u) {
    const float p = expf(warp_dot(qkv + ix.q(b, t, h), qkv + ix.k(b, u, kvh), s.head_dim, lane) * scale -
                         lse[ix.row(b, h, t)]);
    const float dp = warp_dot(dout + ix.o(b, t, h), qkv + ix.v(b, u, kvh), s.head_dim, lane);
    const float ds = p * (dp - delta[ix.row(b, h, t)]) * scale;
    const T* k = qkv + ix.k(b, u, kvh);
    for (int i = 0; i < kSimpleMaxDimPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < s.head_dim) dq[i] += ds * to_float(k[d]);
    }
  }
  for (int i = 0; i < kSimpleMaxDimPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < s.head_dim) dqkv[ix.q(b, t, h) + d] = from_float<T>(dq[i]);
  }
}

template <typename T>
__global__ void simple_attention_dkdv_kernel(const T* dout, const T* qkv, const float* lse, const float* delta,
                                             AttentionShape s, T* dqkv, float scale) {
  const AttentionIndex ix{s};
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= s.batch * s.kv_heads * s.seq) return;
  const int64_t u = row % s.seq, kvh = (row / s.seq) % s.kv_heads, b = row / (s.seq * s.kv_heads);
  float dk[kSimpleMaxDimPerLane] = {}, dv[kSimpleMaxDimPerLane] = {};
  for (int64_t h = kvh * s.group_size(); h < (kvh + 1) * s.group_size(); ++h) {
    for (int64_t t = u; t <= s.last_query(u); ++t) {
      const float p = expf(warp_dot(qkv + ix.q(b, t, h), qkv + ix.k(b, u, kvh), s.head_dim, lane) * scale -
                           lse[ix.row(b, h, t)]);
      const float dp = warp_dot(dout + ix.o(b, t, h), qkv + ix.v(b, u, kvh), s.head_dim, lane);
      const float ds = p * (dp - delta[ix.row(b, h, t)]) * scale;
      const T* q = qkv + ix.q(b, t, h);
      const T* g = dout + ix.o(b, t, h);
      for (int i = 0; i < kSimpleMaxDimPerLane; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < s.head_dim) {
          dk[i] += ds * to_float(q[d]);
          dv[i] += p * to_float(g[d]);
        }
      }
    }
  }
  for (int i = 0; i < kSimpleMaxDimPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < s.head_dim) {
      dqkv[ix.k(b, u, kvh) + d] = from_float<T>(dk[i]);
      dqkv[ix.v(b, u, kvh) + d] = from_float<T>(dv[i]);
    }
  }
}

}  // namespace zb::cuda
