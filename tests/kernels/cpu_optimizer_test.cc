// The optimizer updates against torch.optim's definitions, written out step by step; the deterministic sum
// of squares behind global-norm clipping, the clipping factor, and the step's loss summed where it lives.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "support/random_inputs.h"
#include "support/tensor_views.h"

namespace zb {
namespace {

using test::view;

Tensor scalar(double* value) { return Tensor(value, Shape{1}, DType::f64, Device::cpu()); }

class CpuOptimizer : public ::testing::Test {
 protected:
  // Runs `steps` updates with fresh gradients; returns the parameters after each step.
  std::vector<std::vector<double>> run(OptimizerParams p, const std::vector<double>& initial,
                                       const std::vector<std::vector<double>>& grads) {
    const int64_t n = int64_t(initial.size());
    std::vector<double> master = initial, m(n, 0.0), v(n, 0.0);
    std::vector<std::vector<double>> history;
    for (size_t s = 0; s < grads.size(); ++s) {
      p.step = int64_t(s) + 1;
      std::vector<double> g = grads[s];
      Tensor mt = view(master, {n}), gt = view(g, {n}), m_t = view(m, {n}), v_t = view(v, {n}), none;
      backend.optimizer_step(mt, gt, m_t, v_t, none, p);
      history.push_back(master);
    }
    return history;
  }

  CpuBackend backend;
  test::RandomInputs rnd;
  ::testing::ScopedTrace trace{__FILE__, __LINE__, rnd.trace()};
};

TEST_F(CpuOptimizer, AdamWMatchesTorchOverThreeSteps) {
  const int64_t n = 50;
  OptimizerParams p{OptimizerKind::adamw, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f, 1, 0.5f};
  auto p0 = rnd.normal(n);
  std::vector<std::vector<double>> grads = {rnd.normal(n), rnd.normal(n), rnd.normal(n)};
  auto got = run(p, p0, grads);
  // torch.optim.AdamW: p *= 1 - lr*wd; m, v moments; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
  std::vector<double> x = p0, m(n, 0), v(n, 0);
  const double lr = p.lr, b1 = p.beta1, b2 = p.beta2, eps = p.eps, wd = p.weight_decay, scale = p.grad_scale;
  for (int s = 1; s <= 3; ++s) {
    for (int64_t i = 0; i < n; ++i) {
      const double g = grads[s - 1][i] * scale;
      x[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      x[i] -= lr / (1 - std::pow(b1, s)) * m[i] / (std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, s)) + eps);
    }
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(got[s - 1][i], x[i], 1e-12) << "step " << s << " element " << i;
  }
}

TEST_F(CpuOptimizer, AdamAddsWeightDecayToTheGradient) {
  const int64_t n = 20;
  OptimizerParams p{OptimizerKind::adam, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.5f, 0.9f, 1, 1.0f};
  auto p0 = rnd.normal(n);
  auto g = rnd.normal(n);
  auto got = run(p, p0, {g});
  for (int64_t i = 0; i < n; ++i) {
    // Step 1 of Adam moves by lr * g' / (|g'| + eps) with g' = g + wd * p (bias corrections cancel).
    const double gp = g[i] + double(p.weight_decay) * p0[i];
    EXPECT_NEAR(got[0][i], p0[i] - double(p.lr) * gp / (std::abs(gp) + double(p.eps)), 1e-12);
  }
}

TEST_F(CpuOptimizer, SgdWithMomentumMatchesTorch) {
  const int64_t n = 20;
  OptimizerParams p{OptimizerKind::sgd, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.8f, 1, 0.25f};
  auto p0 = rnd.normal(n);
  std::vector<std::vector<double>> grads = {rnd.normal(n), rnd.normal(n)};
  auto got = run(p, p0, grads);
  std::vector<double> x = p0, buf(n, 0.0);
  for (int s = 0; s < 2; ++s) {
    for (int64_t i = 0; i < n; ++i) {
      const double g = grads[s][i] * double(p.grad_scale) + double(p.weight_decay) * x[i];
      buf[i] = s == 0 ? g : double(p.momentum) * buf[i] + g;  // torch: the buffer starts as the first gradient
      x[i] -= double(p.lr) * buf[i];
      EXPECT_NEAR(got[s][i], x[i], 1e-12) << "step " << s + 1;
    }
  }
}

TEST_F(CpuOptimizer, SumOfSquaresIsExactAndThreadCountIndependent) {
  const int64_t n = 300000;  // several of the fixed chunks
  auto x = rnd.normal<float>(n);
  double expected = 0;
  for (float v : x) expected += double(v) * double(v);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one_thread = backend.sum_of_squares({view(x, {n})});
  omp_set_num_threads(std::max(2, threads));
  const double many_threads = backend.sum_of_squares({view(x, {n})});
  omp_set_num_threads(threads);
  EXPECT_EQ(one_thread, many_threads) << "the same bits whatever the thread count";
  EXPECT_NEAR(one_thread, expected, 1e-9 * expected);
}

// The factor of torch.nn.utils.clip_grad_norm_, and NaN (the step skipped) for a non-finite norm or loss.
TEST_F(CpuOptimizer, ClipFactorFollowsTorchAndFlagsNonFiniteSteps) {
  auto factor_of = [&](double sum_of_squares, double loss, float max_norm, float loss_scale = 1.0f) {
    double ss = sum_of_squares, l = loss;
    float f = -1.0f;
    Tensor ss_t = scalar(&ss), l_t = scalar(&l), f_t(&f, Shape{1}, DType::f32, Device::cpu());
    backend.clip_factor(ss_t, l_t, max_norm, loss_scale, f_t);
    return f;
  };
  const double sum_of_squares = 4.0 + rnd.uniform(1, 0.0, 1.0)[0];
  EXPECT_EQ(factor_of(sum_of_squares, 2.5, 1.0f), float(1.0 / (std::sqrt(sum_of_squares) + 1e-6)));
  EXPECT_EQ(factor_of(sum_of_squares, 2.5, 10.0f), 1.0f) << "a norm under the bound is left alone";
  EXPECT_EQ(factor_of(sum_of_squares, 2.5, 0.0f), 1.0f) << "max_norm 0: no clipping";
  // Gradients scaled by a power of two: the norm is of the true ones, and the factor undoes the scale.
  const float scale = 65536.0f;
  EXPECT_EQ(factor_of(sum_of_squares * scale * scale, 2.5, 1.0f, scale), factor_of(sum_of_squares, 2.5, 1.0f) / scale);
  EXPECT_EQ(factor_of(sum_of_squares * scale * scale, 2.5, 10.0f, scale), 1.0f / scale);
  EXPECT_EQ(factor_of(sum_of_squares * scale * scale, 2.5, 0.0f, scale), 1.0f / scale);
  const double nan = std::nan(""), inf = INFINITY;
  EXPECT_TRUE(std::isnan(factor_of(nan, 2.5, 1.0f)));
  EXPECT_TRUE(std::isnan(factor_of(inf, 2.5, 1.0f)));
  EXPECT_TRUE(std::isnan(factor_of(sum_of_squares, nan, 1.0f)));
  EXPECT_TRUE(std::isnan(factor_of(sum_of_squares, -inf, 0.0f))) << "even without clipping";
}

// A factor read at the update scales as grad_scale does; a NaN one leaves weights and moments untouched.
TEST_F(CpuOptimizer, AFactorReadAtTheUpdateActsAsGradScaleOrSkipsTheStep) {
  const int64_t n = 40;
  for (const OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::adam, OptimizerKind::sgd}) {
    OptimizerParams by_value{kind, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f, 2, 0.375f};
    OptimizerParams by_address = by_value;
    by_address.grad_scale = 7.0f;  // ignored when the factor is read from grad_factor
    float factor = 0.375f;
    by_address.grad_factor = &factor;
    const auto grads = std::vector<std::vector<double>>{rnd.normal(n), rnd.normal(n)};
    const auto initial = rnd.normal(n);
    EXPECT_EQ(run(by_address, initial, grads), run(by_value, initial, grads)) << optimizer_kind_name(kind);
    factor = std::nan("");
    const auto skipped = run(by_address, initial, grads);
    for (const auto& params : skipped) EXPECT_EQ(params, initial) << optimizer_kind_name(kind);
  }
}

TEST_F(CpuOptimizer, AccumulateSumAddsTheScaledSumInOrder) {
  const int64_t n = 1000;
  for (const bool f64 : {false, true}) {
    auto values = rnd.normal(n);
    std::vector<float> values32(values.begin(), values.end());
    double expected = 0.75, sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += f64 ? values[i] : double(values32[i]);
    expected += 0.125 * sum;
    double total = 0.75;
    Tensor total_t = scalar(&total);
    if (f64) {
      backend.accumulate_sum(view(values, {n}), 0.125, total_t);
    } else {
      backend.accumulate_sum(view(values32, {n}), 0.125, total_t);
    }
    EXPECT_EQ(total, expected) << (f64 ? "fp64" : "fp32") << " values";
  }
}

}  // namespace
}  // namespace zb
