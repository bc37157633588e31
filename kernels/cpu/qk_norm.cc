// Per-head RMSNorm of the query and key heads of the fused qkv rows (Gemma 3's q_norm and k_norm), forward and
// backward: each head is a row of head_dim values normalised as rmsnorm_forward normalises a row, with the query
// heads' gain or the key heads'; the value heads pass through.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace zb::cpu {

namespace {

// Where head `head` (query heads, then key heads, then value heads) of token `token` starts in qkv's rows.
int64_t head_at(const AttentionShape& s, int64_t token, int64_t head) {
  return token * s.qkv_width() + head * s.head_dim;
}

}  // namespace

template <typename T>
void qk_norm_forward(const T* qkv_in, const T* q_weight, const T* k_weight, T eps, T gain_offset,
                     const AttentionShape& s, T* qkv_out, T* rstd) {
  const int64_t d = s.head_dim, normed = s.heads + s.kv_heads;
#pragma omp parallel for schedule(static)
  for (int64_t token = 0; token < s.tokens(); ++token) {
    for (int64_t head = 0; head < normed; ++head) {
      const T* weight = head < s.heads ? q_weight : k_weight;
      const T* x = qkv_in + head_at(s, token, head);
      T* out = qkv_out + head_at(s, token, head);
      T sum_sq = 0;
      for (int64_t j = 0; j < d; ++j) sum_sq += x[j] * x[j];
      const T rs = 1 / std::sqrt(sum_sq / d + eps);
      for (int64_t j = 0; j < d; ++j) out[j] = x[j] * rs * (gain_offset + weight[j]);
      rstd[token * normed + head] = rs;
    }
    const int64_t values = head_at(s, token, normed);
    std::copy(qkv_in + values, qkv_in + values + s.kv_width(), qkv_out + values);
  }
}

template <typename T>
void qk_norm_backward(const T* dout, const T* qkv_in, const T* q_weight, const T* k_weight, const T* rstd,
                      T gain_offset, const AttentionShape& s, T* dqkv_in, T* dq_weight, T* dk_weight) {
  const int64_t d = s.head_dim, normed = s.heads + s.kv_heads;
  // dx = rstd * (dnorm - xhat * mean(dnorm * xhat)), dnorm = dout * gain, xhat = x * rstd: rmsnorm_backward's rows.
#pragma omp parallel for schedule(static)
  for (int64_t token = 0; token < s.tokens(); ++token) {
    for (int64_t head = 0; head < normed; ++head) {
      const T* weight = head < s.heads ? q_weight : k_weight;
      const int64_t at = head_at(s, token, head);
      const T* g = dout + at;
      const T* x = qkv_in + at;
      const T rs = rstd[token * normed + head];
      T mean_dnorm_xhat = 0;
      for (int64_t j = 0; j < d; ++j) mean_dnorm_xhat += g[j] * (gain_offset + weight[j]) * x[j] * rs;
      mean_dnorm_xhat /= d;
      for (int64_t j = 0; j < d; ++j) {
        dqkv_in[at + j] = rs * (g[j] * (gain_offset + weight[j]) - x[j] * rs * mean_dnorm_xhat);
      }
    }
    const int64_t values = head_at(s, token, normed);
    std::copy(dout + values, dout + values + s.kv_width(), dqkv_in + values);
  }
  // d(gain)[j] += the sum over tokens and the kind's heads of dout * xhat: one thread a column, in a fixed order.
  auto weight_grad = [&](T* dweight, int64_t first_head, int64_t heads) {
    if (!dweight) return;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < d; ++j) {
      T sum = 0;
      for (int64_t token = 0; token < s.tokens(); ++token) {
        for (int64_t head = first_head; head < first_head + heads; ++head) {
          const int64_t at = head_at(s, token, head) + j;
          sum += dout[at] * qkv_in[at] * rstd[token * normed + head];
        }
      }
      dweight[j] += sum;
    }
  };
  weight_grad(dq_weight, 0, s.heads);
  weight_grad(dk_weight, s.heads, s.kv_heads);
}

#define ZB_INSTANTIATE(T)                                                                                           \
  template void qk_norm_forward<T>(const T*, const T*, const T*, T, T, const AttentionShape&, T*, T*);              \
  template void qk_norm_backward<T>(const T*, const T*, const T*, const T*, const T*, T, const AttentionShape&, T*, \
                                    T*, T*);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(double)

}  // namespace zb::cpu
