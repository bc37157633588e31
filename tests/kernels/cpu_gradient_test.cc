// Every CPU op's backward against central finite differences of its forward, in double precision, on fresh
// random inputs. The scalar checked is L = sum(out * R) for a random R, so the backward is fed dout = R.
// Outputs that the contract says are written are poisoned with NaN first; those it says are added to are
// pre-filled with random values that the check subtracts again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

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

class CpuGradient : public ::testing::Test {
 protected:
  // Runs backward into `grad` pre-filled with random values and returns what backward added.
  template <typename Backward>
  std::vector<double> added_by(size_t n, Backward backward) {
    std::vector<double> grad = rnd.normal(n), before = grad;
    backward(grad);
    for (size_t i = 0; i < n; ++i) grad[i] -= before[i];
    return grad;
  }

  CpuBackend backend;
  test::RandomInputs rnd;
  ::testing::ScopedTrace trace{__FILE__, __LINE__, rnd.trace()};
};

TEST_F(CpuGradient, Embedding) {
  const int64_t n = 9, v = 6, c = 130;  // wider than one 64-column block of the backward's split
  auto ids = rnd.ids(n, int32_t(v));
  ids[3] = ids[7];  // a repeated id must accumulate both rows
  auto table = rnd.normal(v * c), r = rnd.normal(n * c);
  auto loss = [&] {
    std::vector<double> out(n * c, kNaN);
    Tensor o = view(out, {n, c});
    backend.embedding_forward(view(ids), view(table, {v, c}), o, false);
    return dot(out, r);
  };
  auto dtable = added_by(v * c, [&](std::vector<double>& g) {
    Tensor t = view(g, {v, c});
    backend.embedding_backward(view(ids), view(r, {n, c}), t);
  });
  expect_gradient_matches(table, dtable, loss, "dtable");
}

TEST_F(CpuGradient, EmbeddingAccumulateAddsToOutput) {
  const int64_t n = 4, v = 3, c = 2;
  auto ids = rnd.ids(n, int32_t(v));
  auto table = rnd.normal(v * c), out = rnd.normal(n * c), before = out;
  Tensor o = view(out, {n, c});
  backend.embedding_forward(view(ids), view(table, {v, c}), o, true);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) EXPECT_DOUBLE_EQ(out[i * c + j], before[i * c + j] + table[ids[i] * c + j]);
}

TEST_F(CpuGradient, LayerNorm) {
  const int64_t n = 6, c = 7;
  auto x = rnd.normal(n * c, 2.0, 0.5), w = rnd.normal(c, 0.5, 1.0), bias = rnd.normal(c), r = rnd.normal(n * c);
  std::vector<double> mean(n), rstd(n);
  auto forward = [&] {
    std::vector<double> out(n * c, kNaN);
    Tensor o = view(out, {n, c}), m = view(mean, {n}), s = view(rstd, {n});
    backend.layernorm_forward(view(x, {n, c}), view(w, {c}), view(bias, {c}), 1e-5f, o, m, s);
    return out;
  };
  auto loss = [&] { return dot(forward(), r); };
  forward();
  std::vector<double> dw_acc = rnd.normal(c), db_acc = rnd.normal(c), dw0 = dw_acc, db0 = db_acc;
  auto dx = added_by(n * c, [&](std::vector<double>& g) {
    Tensor dxt = view(g, {n, c}), dwt = view(dw_acc, {c}), dbt = view(db_acc, {c});
    backend.layernorm_backward(view(r, {n, c}), view(x, {n, c}), view(w, {c}), view(mean, {n}), view(rstd, {n}), dxt,
                               dwt, dbt);
  });
  for (int64_t j = 0; j < c; ++j) dw_acc[j] -= dw0[j], db_acc[j] -= db0[j];
  expect_gradient_matches(x, dx, loss, "dx");
  expect_gradient_matches(w, dw_acc, loss, "dweight");
  expect_gradient_matches(bias, db_acc, loss, "dbias");
}

TEST_F(CpuGradient, LayerNormOutputIsNormalised) {
  const int64_t n = 3, c = 64;
  auto x = rnd.normal(n * c, 3.0, 1.5);
  std::vector<double> w(c, 1.0), bias(c, 0.0), out(n * c), mean(n), rstd(n);
  Tensor o = view(out, {n, c}), m = view(mean, {n}), s = view(rstd, {n});
  backend.layernorm_forward(view(x, {n, c}), view(w, {c}), view(bias, {c}), 0.0f, o, m, s);
  for (int64_t i = 0; i < n; ++i) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < c; ++j) mu += out[i * c + j] / c;
    for (int64_t j = 0; j < c; ++j) var += (out[i * c + j] - mu) * (out[i * c + j] - mu) / c;
    EXPECT_NEAR(mu, 0.0, 1e-12);
    EXPECT_NEAR(var, 1.0, 1e-12);
  }
}

TEST_F(CpuGradient, RmsNorm) {
  const int64_t n = 5, c = 8;
  auto x = rnd.normal(n * c, 1.5, 0.3), w = rnd.normal(c, 0.5, 1.0), r = rnd.normal(n * c);
  std::vector<double> rstd(n);
  auto forward = [&] {
    std::vector<double> out(n * c, kNaN);
    Tensor o = view(out, {n, c}), s = view(rstd, {n});
    backend.rmsnorm_forward(view(x, {n, c}), view(w, {c}), 1e-6f, o, s);
    return out;
  };
  auto loss = [&] { return dot(forward(), r); };
  forward();
  std::vector<double> dw = rnd.normal(c), dw0 = dw;
  auto dx = added_by(n * c, [&](std::vector<double>& g) {
    Tensor dxt = view(g, {n, c}), dwt = view(dw, {c});
    backend.rmsnorm_backward(view(r, {n, c}), view(x, {n, c}), view(w, {c}), view(rstd, {n}), dxt, dwt);
  });
  for (int64_t j = 0; j < c; ++j) dw[j] -= dw0[j];
  expect_gradient_matches(x, dx, loss, "dx");
  expect_gradient_matches(w, dw, loss, "dweight");
}

class CpuMatmulGradient : public CpuGradient, public ::testing::WithParamInterface<bool> {};

TEST_P(CpuMatmulGradient, AllThreeGradients) {
  const bool with_bias = GetParam();
  const int64_t n = 5, k = 6, m = 4;
  auto x = rnd.normal(n * k), w = rnd.normal(m * k), bias = rnd.normal(m), r = rnd.normal(n * m);
  auto bias_view = [&] { return with_bias ? view(bias, {m}) : Tensor{}; };
  auto loss = [&] {
    std::vector<double> out(n * m, kNaN);
    Tensor o = view(out, {n, m});
    backend.matmul_forward(view(x, {n, k}), view(w, {m, k}), bias_view(), o);
    return dot(out, r);
  };
  std::vector<double> dx(n * k, kNaN), dw = rnd.normal(m * k), db = rnd.normal(m), dw0 = dw, db0 = db;
  Tensor dxt = view(dx, {n, k}), dwt = view(dw, {m, k}), dbt = with_bias ? view(db, {m}) : Tensor{};
  backend.matmul_backward(view(r, {n, m}), view(x, {n, k}), view(w, {m, k}), dxt, dwt, dbt);
  for (size_t i = 0; i < dw.size(); ++i) dw[i] -= dw0[i];
  for (size_t i = 0; i < db.size(); ++i) db[i] -= db0[i];
  expect_gradient_matches(x, dx, loss, "dinp");
  expect_gradient_matches(w, dw, loss, "dweight");
  if (with_bias) expect_gradient_matches(bias, db, loss, "dbias");
  else EXPECT_EQ(db, std::vector<double>(m, 0.0)) << "without a bias, dbias must be left alone";
}

INSTANTIATE_TEST_SUITE_P(BiasOrNot, CpuMatmulGradient, ::testing::Bool());

// GradWrite::overwrite: the parameter gradients are what add mode adds to zeros, whatever they held before
// (NaN here, which any read would carry into the result); the input gradient dx of the norms is still added to.
TEST_F(CpuGradient, OverwrittenParameterGradientsIgnoreWhatTheyHeld) {
  const int64_t n = 6, c = 10, v = 5, m = 4;
  auto x = rnd.normal(n * c, 1.5, 0.3), w = rnd.normal(c, 0.5, 1.0), dout = rnd.normal(n * c);
  auto wm = rnd.normal(m * c), dout_m = rnd.normal(n * m);
  auto ids = rnd.ids(n, int32_t(v));
  std::vector<double> mean(n), rstd(n), out(n * c);
  Tensor o = view(out, {n, c}), mt = view(mean, {n}), st = view(rstd, {n});
  backend.layernorm_forward(view(x, {n, c}), view(w, {c}), view(w, {c}), 1e-5f, o, mt, st);
  const auto nans = [](size_t size) { return std::vector<double>(size, kNaN); };
  // Each op once adding to zeros and once overwriting NaN; dx starts from the same values both times.
  const std::vector<double> dx0 = rnd.normal(n * c);
  for (const bool layernorm : {true, false}) {
    std::vector<double> dx_add = dx0, dw_add(c, 0.0), db_add(c, 0.0), dx_over = dx0, dw_over = nans(c),
                        db_over = nans(c);
    Tensor a = view(dx_add, {n, c}), aw = view(dw_add, {c}), ab = view(db_add, {c});
    Tensor b = view(dx_over, {n, c}), bw = view(dw_over, {c}), bb = view(db_over, {c});
    if (layernorm) {
      backend.layernorm_backward(view(dout, {n, c}), view(x, {n, c}), view(w, {c}), mt, st, a, aw, ab);
      backend.layernorm_backward(view(dout, {n, c}), view(x, {n, c}), view(w, {c}), mt, st, b, bw, bb,
                                 GradWrite::overwrite);
      EXPECT_EQ(db_over, db_add) << "layernorm dbias";
    } else {
      backend.rmsnorm_backward(view(dout, {n, c}), view(x, {n, c}), view(w, {c}), st, a, aw);
      backend.rmsnorm_backward(view(dout, {n, c}), view(x, {n, c}), view(w, {c}), st, b, bw, GradWrite::overwrite);
    }
    EXPECT_EQ(dx_over, dx_add) << (layernorm ? "layernorm" : "rmsnorm") << " dx";
    EXPECT_EQ(dw_over, dw_add) << (layernorm ? "layernorm" : "rmsnorm") << " dweight";
  }
  std::vector<double> dinp(n * c), dwm_add(m * c, 0.0), dbm_add(m, 0.0), dwm_over = nans(m * c), dbm_over = nans(m);
  Tensor di = view(dinp, {n, c}), aw = view(dwm_add, {m, c}), ab = view(dbm_add, {m});
  Tensor bw = view(dwm_over, {m, c}), bb = view(dbm_over, {m});
  backend.matmul_backward(view(dout_m, {n, m}), view(x, {n, c}), view(wm, {m, c}), di, aw, ab);
  backend.matmul_backward(view(dout_m, {n, m}), view(x, {n, c}), view(wm, {m, c}), di, bw, bb, GradWrite::overwrite);
  EXPECT_EQ(dwm_over, dwm_add) << "matmul dweight";
  EXPECT_EQ(dbm_over, dbm_add) << "matmul dbias";
  std::vector<double> dtable_add(v * c, 0.0), dtable_over = nans(v * c);
  Tensor ta = view(dtable_add, {v, c}), tb = view(dtable_over, {v, c});
  backend.embedding_backward(view(ids), view(dout, {n, c}), ta);
  backend.embedding_backward(view(ids), view(dout, {n, c}), tb, GradWrite::overwrite);
  EXPECT_EQ(dtable_over, dtable_add) << "embedding dtable, rows no id selects included";
}

// Attention's output, and its backward against finite differences of L = sum(out * r), for a shape.
class CpuAttention : public CpuGradient {
 protected:
  std::vector<double> output(const AttentionShape& s, std::vector<double>& qkv, std::vector<double>* lse = nullptr) {
    std::vector<double> out(s.tokens() * s.q_width(), kNaN), own_lse;
    std::vector<double>& l = lse ? *lse : own_lse;
    l.assign(s.batch * s.heads * s.seq, kNaN);
    Tensor o = view(out, {s.tokens(), s.q_width()}), lt = view(l, {s.batch, s.heads, s.seq});
    backend.attention_forward(view(qkv, {s.tokens(), s.qkv_width()}), s, o, lt);
    return out;
  }
  void expect_gradient(const AttentionShape& s, std::vector<double>& qkv) {
    auto r = rnd.normal(s.tokens() * s.q_width());
    std::vector<double> lse;
    std::vector<double> out = output(s, qkv, &lse);
    std::vector<double> dqkv(qkv.size(), kNaN);
    Tensor d = view(dqkv, {s.tokens(), s.qkv_width()});
    backend.attention_backward(view(r, {s.tokens(), s.q_width()}), view(qkv, {s.tokens(), s.qkv_width()}),
                               view(out, {s.tokens(), s.q_width()}), view(lse, {s.batch, s.heads, s.seq}), s, d);
    expect_gradient_matches(qkv, dqkv, [&] { return dot(output(s, qkv), r); }, "dqkv");
  }
};

class CpuAttentionGradient : public CpuAttention, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CpuAttentionGradient, QueryKeyValue) {
  const AttentionShape s{2, 5, 4, GetParam(), 4};
  auto qkv = rnd.normal(s.tokens() * s.qkv_width());
  expect_gradient(s, qkv);
}

// Multi-head (4 kv heads), grouped-query (2) and multi-query (1) attention.
INSTANTIATE_TEST_SUITE_P(KvHeads, CpuAttentionGradient, ::testing::Values(4, 2, 1));

// A sliding window of 3 over 7 tokens: each query's output is the softmax over its window's keys alone (written out
// here from the definition, t - 3 < u <= t), and the backward matches the forward's finite differences.
TEST_F(CpuAttention, SlidingWindow) {
  AttentionShape s{2, 7, 4, 2, 4};
  s.window = 3;
  ASSERT_TRUE(s.banded());
  EXPECT_EQ(s.key_span(), 3) << "a query's row spans the window (FLOP counts)";
  auto qkv = rnd.normal(s.tokens() * s.qkv_width());
  const std::vector<double> banded = output(s, qkv);
  const int64_t d = s.head_dim, w = s.qkv_width();
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kv = h / s.group_size();
      for (int64_t t = 0; t < s.seq; ++t) {
        const int64_t first = std::max<int64_t>(0, t - 2);
        const double* q = &qkv[(b * s.seq + t) * w + h * d];
        std::vector<double> p;
        double most = -1e300, sum = 0;
        for (int64_t u = first; u <= t; ++u) {
          const double* k = &qkv[(b * s.seq + u) * w + s.q_width() + kv * d];
          p.push_back(dot(std::vector<double>(q, q + d), std::vector<double>(k, k + d)) / 2.0);  // 1/sqrt(4)
          most = std::max(most, p.back());
        }
        for (double& x : p) sum += (x = std::exp(x - most));
        for (int64_t i = 0; i < d; ++i) {
          double expected = 0;
          for (size_t j = 0; j < p.size(); ++j) {
            const int64_t u = first + int64_t(j);
            expected += p[j] / sum * qkv[(b * s.seq + u) * w + s.q_width() + s.kv_width() + kv * d + i];
          }
          EXPECT_NEAR(banded[(b * s.seq + t) * s.q_width() + h * d + i], expected, 1e-12) << b << h << t << i;
        }
      }
    }
  }
  // Without the window the tokens past it see more keys: other outputs.
  EXPECT_NE(output(AttentionShape{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim}, qkv), banded);
  expect_gradient(s, qkv);
}

TEST_F(CpuGradient, AttentionFirstTokenSeesOnlyItself) {
  const AttentionShape s{1, 3, 2, 1, 4};
  auto qkv = rnd.normal(s.tokens() * s.qkv_width());
  std::vector<double> out(s.tokens() * s.q_width()), lse(s.heads * s.seq);
  Tensor o = view(out, {s.tokens(), s.q_width()}), l = view(lse, {1, s.heads, s.seq});
  backend.attention_forward(view(qkv, {s.tokens(), s.qkv_width()}), s, o, l);
  for (int64_t h = 0; h < s.heads; ++h)  // token 0 attends to itself alone: its output is its value row
    for (int64_t i = 0; i < s.head_dim; ++i) EXPECT_DOUBLE_EQ(out[h * s.head_dim + i], qkv[s.q_width() + s.kv_width() + i]);
}

TEST_F(CpuGradient, Rope) {
  const AttentionShape s{2, 6, 4, 2, 8};
  auto qkv = rnd.normal(s.tokens() * s.qkv_width()), r = rnd.normal(qkv.size());
  auto inv_freq = rnd.uniform(s.head_dim / 2, 0.05, 1.0);
  auto loss = [&] {
    std::vector<double> rotated = qkv;
    Tensor t = view(rotated, {s.tokens(), s.qkv_width()});
    backend.rope_forward(t, view(inv_freq, {s.head_dim / 2}), s);
    return dot(rotated, r);
  };
  std::vector<double> d = r;
  Tensor dt = view(d, {s.tokens(), s.qkv_width()});
  backend.rope_backward(dt, view(inv_freq, {s.head_dim / 2}), s);
  expect_gradient_matches(qkv, d, loss, "dqkv");
}

TEST_F(CpuGradient, RopeLeavesTokenZeroAndValuesUnchanged) {
  const AttentionShape s{1, 3, 2, 1, 4};
  auto qkv = rnd.normal(s.tokens() * s.qkv_width()), before = qkv;
  std::vector<double> inv_freq = {1.0, 0.1};
  Tensor t = view(qkv, {s.tokens(), s.qkv_width()});
  backend.rope_forward(t, view(inv_freq, {2}), s);
  for (int64_t i = 0; i < s.qkv_width(); ++i) EXPECT_DOUBLE_EQ(qkv[i], before[i]) << "token 0 has angle 0";
  for (int64_t tok = 1; tok < s.tokens(); ++tok)
    for (int64_t i = s.q_width() + s.kv_width(); i < s.qkv_width(); ++i)
      EXPECT_DOUBLE_EQ(qkv[tok * s.qkv_width() + i], before[tok * s.qkv_width() + i]) << "values are not rotated";
  EXPECT_NE(qkv[s.qkv_width()], before[s.qkv_width()]) << "token 1's query must rotate";
}

// Elementwise activations: forward through L = sum(out * R), backward fed R.
template <typename Forward, typename Backward>
void check_elementwise(CpuGradient& /*fixture*/, std::vector<double>& x, std::vector<double>& r, int64_t n_out,
                       Forward forward, Backward backward, const char* name) {
  auto loss = [&] {
    std::vector<double> out(n_out, kNaN);
    forward(out);
    return dot(out, r);
  };
  std::vector<double> dx(x.size(), kNaN);
  backward(dx);
  expect_gradient_matches(x, dx, loss, name);
}

TEST_F(CpuGradient, Gelu) {
  const int64_t n = 40;
  auto x = rnd.normal(n, 2.0), r = rnd.normal(n);
  check_elementwise(*this, x, r, n,
      [&](std::vector<double>& out) { Tensor o = view(out, {n}); backend.gelu_forward(view(x, {n}), o); },
      [&](std::vector<double>& dx) { Tensor d = view(dx, {n}); backend.gelu_backward(view(r, {n}), view(x, {n}), d); },
      "gelu dinp");
}

TEST_F(CpuGradient, Relu) {
  const int64_t n = 40;
  auto x = rnd.uniform(n, 0.1, 2.0), r = rnd.normal(n);
  for (int64_t i = 0; i < n; i += 2) x[i] = -x[i];  // both sides, away from the kink at 0
  check_elementwise(*this, x, r, n,
      [&](std::vector<double>& out) { Tensor o = view(out, {n}); backend.relu_forward(view(x, {n}), o); },
      [&](std::vector<double>& dx) { Tensor d = view(dx, {n}); backend.relu_backward(view(r, {n}), view(x, {n}), d); },
      "relu dinp");
}

TEST_F(CpuGradient, SwiGlu) {
  const int64_t n = 5, f = 6;
  auto x = rnd.normal(n * 2 * f, 2.0), r = rnd.normal(n * f);
  check_elementwise(*this, x, r, n * f,
      [&](std::vector<double>& out) { Tensor o = view(out, {n, f}); backend.swiglu_forward(view(x, {n, 2 * f}), o); },
      [&](std::vector<double>& dx) {
        Tensor d = view(dx, {n, 2 * f});
        backend.swiglu_backward(view(r, {n, f}), view(x, {n, 2 * f}), d);
      },
      "swiglu dinp");
}

TEST_F(CpuGradient, ResidualAdds) {
  const int64_t n = 10;
  auto a = rnd.normal(n), b = rnd.normal(n);
  std::vector<double> out(n, kNaN);
  Tensor o = view(out, {n});
  backend.residual_forward(view(a, {n}), view(b, {n}), o);
  for (int64_t i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(out[i], a[i] + b[i]);
}

TEST_F(CpuGradient, CrossEntropyWithVocabularyPadding) {
  const int64_t n = 6, padded = 9, vocab = 7;
  const double scale = 0.37;
  auto logits = rnd.normal(n * padded, 3.0);
  auto targets = rnd.ids(n, int32_t(vocab));
  auto loss = [&] {
    std::vector<double> losses(n, kNaN);
    Tensor l = view(losses, {n});
    backend.cross_entropy_forward(view(logits, {n, padded}), view(targets), vocab, l);
    double sum = 0;
    for (double x : losses) sum += x;
    return scale * sum;
  };
  std::vector<double> grad = logits, losses(n, kNaN);
  Tensor g = view(grad, {n, padded}), l = view(losses, {n});
  backend.cross_entropy_forward_backward(g, view(targets), vocab, float(scale), l);
  double sum = 0;
  for (double x : losses) sum += x;
  EXPECT_NEAR(scale * sum, loss(), 1e-12) << "forward_backward's losses equal forward's";
  // the grad_scale travels through a float: compare against the same rounded factor
  for (double& x : grad) x *= scale / double(float(scale));
  expect_gradient_matches(logits, grad, loss, "dlogits");
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = vocab; j < padded; ++j) EXPECT_EQ(grad[i * padded + j], 0.0) << "padding column gets no gradient";
}

TEST_F(CpuGradient, CrossEntropyOfUniformLogitsIsLogVocab) {
  const int64_t n = 3, vocab = 50;
  std::vector<double> logits(n * vocab, 0.25), losses(n);
  auto targets = rnd.ids(n, int32_t(vocab));
  Tensor l = view(losses, {n});
  backend.cross_entropy_forward(view(logits, {n, vocab}), view(targets), vocab, l);
  for (double x : losses) EXPECT_NEAR(x, std::log(double(vocab)), 1e-12);
}

TEST_F(CpuGradient, ShapeMismatchAndBadIdsAreRefused) {
  std::vector<double> a(6), b(5), out(6);
  Tensor o = view(out, {6});
  EXPECT_THROW(backend.residual_forward(view(a, {6}), view(b, {5}), o), Error);
  std::vector<int32_t> ids = {0, 3};
  std::vector<double> table(6), emb(4);
  Tensor e = view(emb, {2, 2});
  EXPECT_THROW(backend.embedding_forward(view(ids), view(table, {3, 2}), e, false), Error);
  std::vector<float> wrong_dtype(6);
  Tensor w = view(wrong_dtype, {6});
  EXPECT_THROW(backend.residual_forward(view(a, {6}), view(a, {6}), w), Error);
}

}  // namespace
}  // namespace zb
