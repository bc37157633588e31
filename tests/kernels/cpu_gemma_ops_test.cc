// Gemma 3's CPU ops against their definitions written out here and against finite differences of their forwards
// (double precision, fresh random inputs; L = sum(out * R), the backward fed R): RMSNorm with a gain offset (1 + w),
// the per-head q/k norms, GeGLU, scaling by a constant, and attention with a softmax scale of its own. Outputs the
// contract says are written start as NaN; those it says are added to start from random values subtracted again.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "core/errors.h"
#include "kernels/cpu/cpu_backend.h"
#include "support/gradient_check.h"
#include "support/random_inputs.h"
#include "support/tensor_views.h"

namespace zb {
namespace {

using test::dot;
using test::expect_gradient_matches;
using test::view;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

class CpuGemmaOps : public ::testing::Test {
 protected:
  std::vector<double> minus(std::vector<double> a, const std::vector<double>& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
    return a;
  }

  CpuBackend backend;
  test::RandomInputs rnd;
  ::testing::ScopedTrace trace{__FILE__, __LINE__, rnd.trace()};
};

// out = x / sqrt(mean(x^2) + eps) * (1 + w) with Gemma's offset of 1, w near its initial 0; the gradients of x and w
// against finite differences; the fused residual form normalises the sum the same way.
TEST_F(CpuGemmaOps, RmsNormWithAGainOffset) {
  const int64_t n = 5, c = 8;
  const float eps = 1e-6f, offset = 1.0f;
  auto x = rnd.normal(n * c, 1.5, 0.3), w = rnd.normal(c, 0.3), r = rnd.normal(n * c);
  std::vector<double> rstd(n);
  auto forward = [&](float gain_offset) {
    std::vector<double> out(n * c, kNaN);
    Tensor o = view(out, {n, c}), s = view(rstd, {n});
    backend.rmsnorm_forward(view(x, {n, c}), view(w, {c}), eps, o, s, gain_offset);
    return out;
  };
  const std::vector<double> out = forward(offset);
  for (int64_t i = 0; i < n; ++i) {
    double sum_sq = 0;
    for (int64_t j = 0; j < c; ++j) sum_sq += x[i * c + j] * x[i * c + j];
    const double rs = 1 / std::sqrt(sum_sq / c + double(eps));
    EXPECT_NEAR(rstd[i], rs, 1e-12);
    for (int64_t j = 0; j < c; ++j) EXPECT_NEAR(out[i * c + j], x[i * c + j] * rs * (1 + w[j]), 1e-12) << i << j;
  }
  EXPECT_NE(forward(0.0f), out) << "the offset must change the gain";

  forward(offset);
  const std::vector<double> dx0 = rnd.normal(n * c), dw0 = rnd.normal(c);
  std::vector<double> dx = dx0, dw = dw0;
  Tensor dxt = view(dx, {n, c}), dwt = view(dw, {c});
  backend.rmsnorm_backward(view(r, {n, c}), view(x, {n, c}), view(w, {c}), view(rstd, {n}), dxt, dwt, GradWrite::add,
                           offset);
  auto loss = [&] { return dot(forward(offset), r); };
  std::vector<double> added_dx = minus(dx, dx0), added_dw = minus(dw, dw0);
  expect_gradient_matches(x, added_dx, loss, "dx");
  expect_gradient_matches(w, added_dw, loss, "dweight");

  // Overwritten, the weight's gradient is what add mode adds (NaN before, which a read would carry on).
  forward(offset);
  std::vector<double> dx_again = dx0, dw_over(c, kNaN);
  Tensor dxa = view(dx_again, {n, c}), dwo = view(dw_over, {c});
  backend.rmsnorm_backward(view(r, {n, c}), view(x, {n, c}), view(w, {c}), view(rstd, {n}), dxa, dwo,
                           GradWrite::overwrite, offset);
  for (int64_t j = 0; j < c; ++j) EXPECT_NEAR(dw_over[j], added_dw[j], 1e-12);

  auto b = rnd.normal(n * c);
  std::vector<double> sum(n * c, kNaN), fused(n * c, kNaN), fused_rstd(n), sum_direct(n * c);
  Tensor st = view(sum, {n, c}), ft = view(fused, {n, c}), frt = view(fused_rstd, {n});
  backend.residual_rmsnorm_forward(view(x, {n, c}), view(b, {n, c}), st, view(w, {c}), eps, ft, frt, offset);
  for (int64_t i = 0; i < n * c; ++i) sum_direct[i] = x[i] + b[i];
  std::vector<double> direct(n * c), direct_rstd(n);
  Tensor dt = view(direct, {n, c}), drt = view(direct_rstd, {n});
  backend.rmsnorm_forward(view(sum_direct, {n, c}), view(w, {c}), eps, dt, drt, offset);
  EXPECT_EQ(fused, direct) << "the fused residual norm takes the offset too";
}

// Each query head is normalised with the query gain and each key head with the key gain, over its head_dim values;
// value heads are copied; rstd holds each token's query heads' then key heads' statistics.
TEST_F(CpuGemmaOps, QkNormForwardIsEachHeadsRmsNorm) {
  const AttentionShape s{2, 3, 4, 2, 6};
  const float eps = 1e-6f, offset = 1.0f;
  auto qkv = rnd.normal(s.tokens() * s.qkv_width(), 1.2), qw = rnd.normal(s.head_dim, 0.3),
       kw = rnd.normal(s.head_dim, 0.3);
  std::vector<double> out(qkv.size(), kNaN), rstd(s.tokens() * (s.heads + s.kv_heads), kNaN);
  Tensor o = view(out, {s.tokens(), s.qkv_width()}), rt = view(rstd, {s.tokens(), s.heads + s.kv_heads});
  backend.qk_norm_forward(view(qkv, {s.tokens(), s.qkv_width()}), view(qw, {s.head_dim}), view(kw, {s.head_dim}), eps,
                          offset, s, o, rt);
  const int64_t d = s.head_dim;
  for (int64_t t = 0; t < s.tokens(); ++t) {
    for (int64_t h = 0; h < s.heads + 2 * s.kv_heads; ++h) {
      const int64_t at = t * s.qkv_width() + h * d;
      if (h >= s.heads + s.kv_heads) {
        for (int64_t j = 0; j < d; ++j) EXPECT_EQ(out[at + j], qkv[at + j]) << "value head " << h << " copied";
        continue;
      }
      const std::vector<double>& gain = h < s.heads ? qw : kw;
      double sum_sq = 0;
      for (int64_t j = 0; j < d; ++j) sum_sq += qkv[at + j] * qkv[at + j];
      const double rs = 1 / std::sqrt(sum_sq / d + double(eps));
      EXPECT_NEAR(rstd[t * (s.heads + s.kv_heads) + h], rs, 1e-12);
      for (int64_t j = 0; j < d; ++j) {
        EXPECT_NEAR(out[at + j], qkv[at + j] * rs * (1 + gain[j]), 1e-12) << "token " << t << " head " << h;
      }
    }
  }
  std::vector<double> in_place = qkv;
  Tensor same = view(in_place, {s.tokens(), s.qkv_width()});
  EXPECT_THROW(backend.qk_norm_forward(same, view(qw, {d}), view(kw, {d}), eps, offset, s, same, rt), Error)
      << "the backward reads the norms' input: it must survive the forward";
}

TEST_F(CpuGemmaOps, QkNormBackwardMatchesFiniteDifferences) {
  const AttentionShape s{2, 3, 4, 2, 6};
  const float eps = 1e-6f, offset = 1.0f;
  const int64_t d = s.head_dim, rows = s.tokens(), width = s.qkv_width(), normed = s.heads + s.kv_heads;
  auto qkv = rnd.normal(rows * width, 1.2), qw = rnd.normal(d, 0.3), kw = rnd.normal(d, 0.3),
       r = rnd.normal(rows * width);
  std::vector<double> rstd(rows * normed);
  auto forward = [&] {
    std::vector<double> out(qkv.size(), kNaN);
    Tensor o = view(out, {rows, width}), rt = view(rstd, {rows, normed});
    backend.qk_norm_forward(view(qkv, {rows, width}), view(qw, {d}), view(kw, {d}), eps, offset, s, o, rt);
    return out;
  };
  auto loss = [&] { return dot(forward(), r); };
  auto backward = [&](std::vector<double>& dqkv, Tensor dq, Tensor dk, GradWrite write) {
    forward();
    Tensor dt = view(dqkv, {rows, width});
    backend.qk_norm_backward(view(r, {rows, width}), view(qkv, {rows, width}), view(qw, {d}), view(kw, {d}),
                             view(rstd, {rows, normed}), offset, s, dt, dq, dk, write);
  };
  const std::vector<double> dq0 = rnd.normal(d), dk0 = rnd.normal(d);
  std::vector<double> dqkv(qkv.size(), kNaN), dq = dq0, dk = dk0;
  backward(dqkv, view(dq, {d}), view(dk, {d}), GradWrite::add);
  std::vector<double> added_dq = minus(dq, dq0), added_dk = minus(dk, dk0);
  expect_gradient_matches(qkv, dqkv, loss, "dqkv");
  expect_gradient_matches(qw, added_dq, loss, "dq_weight");
  expect_gradient_matches(kw, added_dk, loss, "dk_weight");

  std::vector<double> dqkv_over(qkv.size(), kNaN), dq_over(d, kNaN), dk_over(d, kNaN);
  backward(dqkv_over, view(dq_over, {d}), view(dk_over, {d}), GradWrite::overwrite);
  EXPECT_EQ(dqkv_over, dqkv);
  for (int64_t j = 0; j < d; ++j) {
    EXPECT_NEAR(dq_over[j], added_dq[j], 1e-12) << "overwritten dq_weight";
    EXPECT_NEAR(dk_over[j], added_dk[j], 1e-12) << "overwritten dk_weight";
  }
  // Frozen gains (LoRA): no gradient views, the input's gradient all the same.
  std::vector<double> dqkv_frozen(qkv.size(), kNaN);
  backward(dqkv_frozen, Tensor{}, Tensor{}, GradWrite::add);
  EXPECT_EQ(dqkv_frozen, dqkv);
  // In place over dout is refused: the gains' gradients read dout after the input's gradient is written.
  Tensor in_place = view(r, {rows, width}), dq_view = view(dq, {d}), dk_view = view(dk, {d});
  EXPECT_THROW(backend.qk_norm_backward(in_place, view(qkv, {rows, width}), view(qw, {d}), view(kw, {d}),
                                        view(rstd, {rows, normed}), offset, s, in_place, dq_view, dk_view),
               Error);
}

// out = gelu_tanh(gate) * up over rows holding the gate then the up projection; the backward against finite
// differences.
TEST_F(CpuGemmaOps, GeGlu) {
  const int64_t n = 5, f = 6;
  auto x = rnd.normal(n * 2 * f, 2.0), r = rnd.normal(n * f);
  auto forward = [&] {
    std::vector<double> out(n * f, kNaN);
    Tensor o = view(out, {n, f});
    backend.geglu_forward(view(x, {n, 2 * f}), o);
    return out;
  };
  const std::vector<double> out = forward();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j)
      EXPECT_NEAR(out[i * f + j], gelu_tanh(x[i * 2 * f + j]) * x[i * 2 * f + f + j], 1e-12) << i << " " << j;
  std::vector<double> dx(x.size(), kNaN);
  Tensor dt = view(dx, {n, 2 * f});
  backend.geglu_backward(view(r, {n, f}), view(x, {n, 2 * f}), dt);
  expect_gradient_matches(
      x, dx, [&] { return dot(forward(), r); }, "geglu dinp");
}

TEST_F(CpuGemmaOps, ScaleMultipliesInPlaceOrNot) {
  const int64_t n = 9;
  auto x = rnd.normal(n);
  std::vector<double> out(n, kNaN), in_place = x;
  Tensor o = view(out, {n}), p = view(in_place, {n});
  backend.scale(view(x, {n}), 33.941, o);
  backend.scale(p, 33.941, p);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(out[i], x[i] * 33.941);
    EXPECT_EQ(in_place[i], out[i]);
  }
  EXPECT_THROW(backend.scale(view(x, {n}), std::numeric_limits<double>::infinity(), o), Error);
}

// Attention with the scores scaled by the shape's softmax_scale (Gemma's query_pre_attn_scalar^-0.5) rather than
// 1/sqrt(head_dim): outputs against the softmax written out over each query's window, and the backward against
// finite differences; a scale of 1/sqrt(head_dim) given explicitly is the default one.
TEST_F(CpuGemmaOps, AttentionTakesTheShapesSoftmaxScale) {
  AttentionShape s{2, 6, 4, 2, 8};
  s.window = 4;
  s.softmax_scale = 0.3;
  const int64_t d = s.head_dim, w = s.qkv_width();
  auto qkv = rnd.normal(s.tokens() * w);
  auto output = [&](const AttentionShape& shape, std::vector<double>* lse_out = nullptr) {
    std::vector<double> out(s.tokens() * s.q_width(), kNaN), lse(s.batch * s.heads * s.seq, kNaN);
    Tensor o = view(out, {s.tokens(), s.q_width()}), l = view(lse, {s.batch, s.heads, s.seq});
    backend.attention_forward(view(qkv, {s.tokens(), w}), shape, o, l);
    if (lse_out) *lse_out = lse;
    return out;
  };
  const std::vector<double> out = output(s);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kv = h / s.group_size();
      for (int64_t t = 0; t < s.seq; ++t) {
        const int64_t first = std::max<int64_t>(0, t - s.window + 1);
        std::vector<double> p;
        double most = -1e300, sum = 0;
        for (int64_t u = first; u <= t; ++u) {
          double score = 0;
          for (int64_t i = 0; i < d; ++i)
            score += qkv[(b * s.seq + t) * w + h * d + i] * qkv[(b * s.seq + u) * w + s.q_width() + kv * d + i];
          p.push_back(score * 0.3);
          most = std::max(most, p.back());
        }
        for (double& x : p) sum += (x = std::exp(x - most));
        for (int64_t i = 0; i < d; ++i) {
          double expected = 0;
          for (size_t j = 0; j < p.size(); ++j) {
            expected +=
                p[j] / sum * qkv[(b * s.seq + first + int64_t(j)) * w + s.q_width() + s.kv_width() + kv * d + i];
          }
          EXPECT_NEAR(out[(b * s.seq + t) * s.q_width() + h * d + i], expected, 1e-12) << b << h << t << i;
        }
      }
    }
  }
  AttentionShape unscaled = s;
  unscaled.softmax_scale = 0;
  const std::vector<double> by_default = output(unscaled);
  EXPECT_NE(by_default, out) << "the scale must matter";
  AttentionShape explicit_default = s;
  explicit_default.softmax_scale = 1 / std::sqrt(double(d));
  const std::vector<double> explicitly = output(explicit_default);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(explicitly[i], by_default[i], 1e-14);

  auto r = rnd.normal(s.tokens() * s.q_width());
  std::vector<double> lse;
  std::vector<double> forward_out = output(s, &lse);
  std::vector<double> dqkv(qkv.size(), kNaN);
  Tensor dt = view(dqkv, {s.tokens(), w});
  backend.attention_backward(view(r, {s.tokens(), s.q_width()}), view(qkv, {s.tokens(), w}),
                             view(forward_out, {s.tokens(), s.q_width()}), view(lse, {s.batch, s.heads, s.seq}), s, dt);
  expect_gradient_matches(
      qkv, dqkv, [&] { return dot(output(s), r); }, "dqkv");
}

}  // namespace
}  // namespace zb
