// Causal self-attention with grouped-query heads (each query over the keys of its sliding window, where the shape
// has one), and rotary position embeddings.
// Forward keeps only each query row's log-sum-exp; backward rebuilds the probabilities from it, as a
// flash-attention kernel does, so the [seq, seq] matrix is never stored.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace zb::cpu {

namespace {

// Pointers into the fused qkv rows of one (batch, head) pair.
template <typename T>
struct HeadView {
  const AttentionShape& s;
  int64_t b, h;
  int64_t kvh() const { return h / s.group_size(); }
  int64_t row(int64_t t) const { return (b * s.seq + t) * s.qkv_width(); }
  int64_t q(int64_t t) const { return row(t) + h * s.head_dim; }
  int64_t k(int64_t t) const { return row(t) + s.q_width() + kvh() * s.head_dim; }
  int64_t v(int64_t t) const { return row(t) + s.q_width() + s.kv_width() + kvh() * s.head_dim; }
  int64_t o(int64_t t) const { return (b * s.seq + t) * s.q_width() + h * s.head_dim; }
  int64_t lse(int64_t t) const { return (b * s.heads + h) * s.seq + t; }
};

// The scores' scale: the shape's own, or 1/sqrt(head_dim) computed in T as it always was.
template <typename T>
T score_scale(const AttentionShape& s) {
  return s.default_scale() ? 1 / std::sqrt(static_cast<T>(s.head_dim)) : static_cast<T>(s.softmax_scale);
}

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace

template <typename T>
void attention_forward(const T* qkv, const AttentionShape& s, T* out, T* lse) {
  const T scale = score_scale<T>(s);
  const int64_t d = s.head_dim;
#pragma omp parallel
  {
    std::vector<T> scores(s.seq);
#pragma omp for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
      for (int64_t t = 0; t < s.seq; ++t) {
        HeadView<T> hv{s, bh / s.heads, bh % s.heads};
        T max_score = -std::numeric_limits<T>::infinity();
        const int64_t first = s.first_key(t);
        for (int64_t u = first; u <= t; ++u) {
          scores[u] = dot(qkv + hv.q(t), qkv + hv.k(u), d) * scale;
          max_score = std::max(max_score, scores[u]);
        }
        T sum = 0;
        for (int64_t u = first; u <= t; ++u) sum += (scores[u] = std::exp(scores[u] - max_score));
        T* o = out + hv.o(t);
        for (int64_t i = 0; i < d; ++i) o[i] = 0;
        for (int64_t u = first; u <= t; ++u) {
          const T p = scores[u] / sum;
          const T* v = qkv + hv.v(u);
          for (int64_t i = 0; i < d; ++i) o[i] += p * v[i];
        }
        lse[hv.lse(t)] = max_score + std::log(sum);
      }
    }
  }
}

template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* out, const T* lse, const AttentionShape& s, T* dqkv) {
  const T scale = score_scale<T>(s);
  const int64_t d = s.head_dim;
  // One thread per (batch, kv head): it alone writes that kv head's dk and dv and its query heads' dq.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t kvh = 0; kvh < s.kv_heads; ++kvh) {
      HeadView<T> first{s, b, kvh * s.group_size()};
      for (int64_t t = 0; t < s.seq; ++t) {
        std::fill_n(dqkv + first.k(t), d, T(0));
        std::fill_n(dqkv + first.v(t), d, T(0));
      }
      for (int64_t h = kvh * s.group_size(); h < (kvh + 1) * s.group_size(); ++h) {
        HeadView<T> hv{s, b, h};
        for (int64_t t = 0; t < s.seq; ++t) {
          const T* dO = dout + hv.o(t);
          const T delta = dot(dO, out + hv.o(t), d);  // sum_u p_tu * dp_tu
          T* dq = dqkv + hv.q(t);
          std::fill_n(dq, d, T(0));
          for (int64_t u = s.first_key(t); u <= t; ++u) {
            const T p = std::exp(dot(qkv + hv.q(t), qkv + hv.k(u), d) * scale - lse[hv.lse(t)]);
            const T dp = dot(dO, qkv + hv.v(u), d);
            const T ds = p * (dp - delta) * scale;
            const T* q = qkv + hv.q(t);
            const T* k = qkv + hv.k(u);
            T* dk = dqkv + hv.k(u);
            T* dv = dqkv + hv.v(u);
            for (int64_t i = 0; i < d; ++i) {
              dq[i] += ds * k[i];
              dk[i] += ds * q[i];
              dv[i] += p * dO[i];
            }
          }
        }
      }
    }
  }
}

template <typename T>
void rope_rotate(T* qkv, const T* inv_freq, const AttentionShape& s, int direction) {
  const int64_t half = s.head_dim / 2;
  const int64_t rotated_heads = s.heads + s.kv_heads;  // query heads then key heads, adjacent in each row
#pragma omp parallel for schedule(static)
  for (int64_t token = 0; token < s.tokens(); ++token) {
    const T position = static_cast<T>(token % s.seq);
    for (int64_t head = 0; head < rotated_heads; ++head) {
      T* x = qkv + token * s.qkv_width() + head * s.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const T angle = position * inv_freq[i];
        const T c = std::cos(angle), sn = direction * std::sin(angle);
        const T x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * sn;
        x[i + half] = x2 * c + x1 * sn;
      }
    }
  }
}

#define ZB_INSTANTIATE(T)                                                                                         \
  template void attention_forward<T>(const T*, const AttentionShape&, T*, T*);                                   \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, const AttentionShape&, T*);        \
  template void rope_rotate<T>(T*, const T*, const AttentionShape&, int);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(double)

}  // namespace zb::cpu
