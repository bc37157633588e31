// AdamW with 8-bit moments (cpu::optimizer_step_8bit) against fp32 AdamW (cpu::optimizer_step<float>): the
// first step from zero moments is fp32's bit for bit (the update reads the moments before they are stored in
// 8 bits), the stored moments are within one code's step of fp32's (stochastic rounding takes either code
// around a value), and over 3,000 steps of a noisy quadratic with 10,001 parameters (five blocks, the last
// partial) the loss ends within 2% of fp32's.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/blockwise_quantization.h"
#include "kernels/cpu/cpu_ops.h"

namespace zb {
namespace {

struct EightBitState {
  std::vector<uint8_t> m_codes, v_codes;
  std::vector<float> m_scales, v_scales;
  explicit EightBitState(int64_t n)
      : m_codes(n, 0), v_codes(n, 0), m_scales(quantization_blocks(n), 0.0f), v_scales(quantization_blocks(n), 0.0f) {}
  QuantizedMoments view() { return {m_codes.data(), v_codes.data(), m_scales.data(), v_scales.data()}; }
  std::vector<float> moment(bool first) const {
    std::vector<float> out(m_codes.size());
    const int64_t n = int64_t(out.size());
    for (int64_t b = 0; b < quantization_blocks(n); ++b) {
      const int64_t begin = b * kQuantizationBlock, count = std::min(kQuantizationBlock, n - begin);
      if (first) {
        dequantize_block(m_codes.data() + begin, count, m_scales[b], DynamicMap::signed_map(), out.data() + begin);
      } else {
        dequantize_block(v_codes.data() + begin, count, v_scales[b], DynamicMap::unsigned_map(), out.data() + begin);
      }
    }
    return out;
  }
};

TEST(EightBitAdamW, FirstStepIsFp32sAndTheMomentsAreStoredWithinAStep) {
  const int64_t n = 10'001;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> master(n), grad(n);
  for (int64_t i = 0; i < n; ++i) master[i] = normal(rng), grad[i] = 1e-2f * normal(rng);
  OptimizerParams p;
  p.lr = 1e-2f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.5f;
  std::vector<float> reference = master, m(n, 0.0f), v(n, 0.0f);
  cpu::optimizer_step<float>(reference.data(), grad.data(), m.data(), v.data(), n, p);
  EightBitState state(n);
  cpu::optimizer_step_8bit(master.data(), grad.data(), state.view(), n, p);
  EXPECT_EQ(master, reference);
  const std::vector<float> m8 = state.moment(true), v8 = state.moment(false);
  for (int64_t b = 0; b < quantization_blocks(n); ++b) {
    const int64_t begin = b * kQuantizationBlock, end = std::min(n, begin + kQuantizationBlock);
    float m_scale = 0, v_scale = 0;
    for (int64_t i = begin; i < end; ++i) m_scale = std::max(m_scale, std::fabs(m[i])), v_scale = std::max(v_scale, v[i]);
    EXPECT_EQ(state.m_scales[b], m_scale);
    EXPECT_EQ(state.v_scales[b], v_scale);
    for (int64_t i = begin; i < end; ++i) {
      // The top decade's step, 0.9/64 (signed) and 0.9/128 (unsigned) of the scale, bounds every decade's.
      ASSERT_LE(std::fabs(m8[i] - m[i]), 0.9f / 64 * m_scale * 1.0001f) << i;
      ASSERT_LE(std::fabs(v8[i] - v[i]), 0.9f / 128 * v_scale * 1.0001f) << i;
    }
  }
}

double loss_of(const std::vector<float>& w, const std::vector<float>& target) {
  double sum = 0;
  for (size_t i = 0; i < w.size(); ++i) sum += 0.5 * double(w[i] - target[i]) * double(w[i] - target[i]);
  return sum;
}

// The gradient shrinks as the parameters near their targets, so Adam's second moment must follow it down by
// 0.1% a step: the case where rounding to the nearest code stalls (see blockwise_quantization.h).
TEST(EightBitAdamW, FollowsFp32OnANoisyQuadratic) {
  const int64_t n = 10'001;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> target(n), start(n);
  for (int64_t i = 0; i < n; ++i) target[i] = normal(rng), start[i] = target[i] + 2.0f * normal(rng);
  OptimizerParams p;
  p.lr = 1e-2f;
  p.weight_decay = 0.0f;
  std::vector<float> w32 = start, w8 = start, m(n, 0.0f), v(n, 0.0f), g32(n), g8(n);
  EightBitState state(n);
  const double initial = loss_of(start, target);
  for (int64_t step = 1; step <= 3000; ++step) {
    p.step = step;
    for (int64_t i = 0; i < n; ++i) {
      const float noise = 0.3f * normal(rng);  // the same noise for both
      g32[i] = w32[i] - target[i] + noise;
      g8[i] = w8[i] - target[i] + noise;
    }
    cpu::optimizer_step<float>(w32.data(), g32.data(), m.data(), v.data(), n, p);
    cpu::optimizer_step_8bit(w8.data(), g8.data(), state.view(), n, p);
  }
  const double fp32_loss = loss_of(w32, target), eight_bit_loss = loss_of(w8, target);
  std::printf("loss from %.1f: fp32 %.3f, 8-bit %.3f\n", initial, fp32_loss, eight_bit_loss);
  EXPECT_LT(fp32_loss, 1e-3 * initial) << "the problem is learnt";
  EXPECT_NEAR(eight_bit_loss, fp32_loss, 0.02 * fp32_loss);
}

}  // namespace
}  // namespace zb
