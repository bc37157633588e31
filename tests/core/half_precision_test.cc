// The host's fp16 conversions (core/f16.h) against values IEEE 754 fixes: rounding to nearest even at every
// boundary (normal, subnormal, the largest finite value), infinities and NaN, and every one of the 63,488
// finite half patterns surviving the round trip through float unchanged. The CPU optimizer writes fp16 weights
// with these (and with the F16C instructions, which its test compares with them).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/f16.h"

namespace zb {
namespace {

TEST(HalfPrecision, KnownValuesRoundToNearestEven) {
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7bff) << "the largest finite half";
  EXPECT_EQ(float_to_f16_bits(65519.0f), 0x7bff) << "under half an ulp above it";
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7c00) << "halfway to 65536 rounds to even: infinity";
  EXPECT_EQ(float_to_f16_bits(1e6f), 0x7c00);
  EXPECT_EQ(float_to_f16_bits(-1e6f), 0xfc00);
  EXPECT_EQ(float_to_f16_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to the even one, 1; 1 + 3 * 2^-11 goes up to 1 + 2^-9.
  EXPECT_EQ(float_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(float_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(float_to_f16_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01) << "above halfway";
  // Subnormals: 2^-24 is the smallest; 2^-25 is halfway to zero (even: zero), a little more rounds up.
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_f16_bits(std::ldexp(3.0f, -25)), 0x0002) << "1.5 ulp: to the even 2";
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400) << "the smallest normal";
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1023.5f, -24)), 0x0400) << "the largest subnormal's halfway rounds up to it";
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -30)), 0x0000);
  const uint16_t nan = float_to_f16_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0) << "NaN stays NaN";
}

TEST(HalfPrecision, EveryFiniteHalfSurvivesTheRoundTrip) {
  int checked = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    if ((bits & 0x7c00) == 0x7c00) continue;  // infinities and NaNs
    const float value = f16_bits_to_float(uint16_t(bits));
    ASSERT_EQ(float_to_f16_bits(value), bits) << "half 0x" << std::hex << bits << " read as " << value;
    ++checked;
  }
  EXPECT_EQ(checked, 63488);
  EXPECT_EQ(f16_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_bits_to_float(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_bits_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_bits_to_float(0xbc00), -1.0f);
  EXPECT_TRUE(std::isinf(f16_bits_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_bits_to_float(0x7e00)));
}

}  // namespace
}  // namespace zb
