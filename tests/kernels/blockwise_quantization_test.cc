// Block-wise dynamic quantization (kernels/blockwise_quantization.h): the maps' codes (0 and the ends exact,
// every decade from 1 down to 10^-6 or 10^-7, each decade's values evenly spaced and meeting the next), the
// nearest code against a search of all 256, and blocks of random values, heavy-tailed and ordinary: the scale
// exact, each value within half a step of its decade (the map's own bound: 0.45 * 10^-e / 2^b of the scale),
// zeros staying zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "kernels/blockwise_quantization.h"

namespace zb {
namespace {

// The largest error a value of magnitude m (relative to the block's scale, in [0, 1]) may take: half the step
// of its decade (bits_after_sign: 7 signed, 8 unsigned); at or below the smallest value (10^-(bits - 1), alone
// in its decade), the distance to the nearer of it and 0.
double allowed_error(double m, int bits_after_sign) {
  const double smallest = std::pow(10.0, -(bits_after_sign - 1));
  if (m <= smallest) return std::min(m, smallest - m) * (1 + 1e-5);
  const int e = std::max(0, int(std::floor(-std::log10(m))));
  const double step = 0.9 * std::pow(10.0, -e) / std::pow(2.0, bits_after_sign - 1 - e);
  return 0.5 * step * (1 + 1e-5);
}

TEST(DynamicMap, CodesCoverEveryDecadeWithZeroAndOneExact) {
  const DynamicMap& s = DynamicMap::signed_map();
  EXPECT_EQ(s.value(0x00), 0.0f);
  EXPECT_EQ(s.value(0x7f), 1.0f);
  EXPECT_EQ(s.value(0xff), -1.0f);
  EXPECT_FLOAT_EQ(s.value(0x01), 1e-6f) << "the smallest magnitude: six leading zeros, no fraction bits";
  EXPECT_FLOAT_EQ(s.value(0x40), 0.1f + 0.9f / 64) << "the first of decade 0";
  EXPECT_FLOAT_EQ(s.value(0x3f), 0.1f) << "decade 1 ends where decade 0 begins";
  std::set<float> distinct;
  for (int c = 0; c < 256; ++c) distinct.insert(s.value(uint8_t(c)));
  EXPECT_EQ(distinct.size(), 255u) << "all distinct but +0 and -0";
  for (int c = 1; c < 0x7f; ++c) EXPECT_LT(s.value(uint8_t(c)), s.value(uint8_t(c + 1))) << c;
  for (int c = 0; c < 0x80; ++c) EXPECT_EQ(s.value(uint8_t(c | 0x80)), -s.value(uint8_t(c)));

  const DynamicMap& u = DynamicMap::unsigned_map();
  EXPECT_EQ(u.value(0), 0.0f);
  EXPECT_EQ(u.value(255), 1.0f);
  EXPECT_FLOAT_EQ(u.value(1), 1e-7f);
  EXPECT_FLOAT_EQ(u.value(0x80), 0.1f + 0.9f / 128);
  for (int c = 0; c < 255; ++c) EXPECT_LT(u.value(uint8_t(c)), u.value(uint8_t(c + 1))) << c;
}

TEST(DynamicMap, NearestIsTheClosestOfAllCodes) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const DynamicMap* map : {&DynamicMap::signed_map(), &DynamicMap::unsigned_map()}) {
    for (int i = 0; i < 20000; ++i) {
      float x = uniform(rng);
      if (i % 2) x = std::copysign(std::pow(10.0f, -8 * std::fabs(x)), x);  // every decade
      if (!map->is_signed()) x = std::fabs(x);
      float best = 2;
      for (int c = 0; c < 256; ++c) best = std::min(best, std::fabs(map->value(uint8_t(c)) - x));
      ASSERT_EQ(std::fabs(map->value(map->nearest(x)) - x), best) << "x = " << x;
    }
  }
}

// The count of values at or below x, read off the maps' structure, is a search's: at every value, a float either
// side of it, the midpoints, the decades' ends, and random quotients over the whole range.
TEST(DynamicMap, CountAtOrBelowIsTheSearchs) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const DynamicMap* map : {&DynamicMap::signed_map(), &DynamicMap::unsigned_map()}) {
    const float* sorted = map->sorted_values();
    std::vector<float> probes = {0.0f, -0.0f, 1.0f, -1.0f, 1.0000001f, -1.0000001f, 2.0f, -2.0f};
    for (int i = 0; i < 256; ++i) {
      probes.push_back(sorted[i]);
      probes.push_back(std::nextafter(sorted[i], 2.0f));
      probes.push_back(std::nextafter(sorted[i], -2.0f));
      if (i < 255) probes.push_back(0.5f * (sorted[i] + sorted[i + 1]));
    }
    for (int e = 0; e <= 8; ++e) {
      const float top = float(std::pow(10.0, -e));
      for (float x : {top, std::nextafter(top, 2.0f), std::nextafter(top, 0.0f)}) {
        probes.push_back(x);
        probes.push_back(-x);
      }
    }
    for (int i = 0; i < 100'000; ++i) {
      const float x = uniform(rng);
      probes.push_back(x * std::pow(10.0f, -float(i % 9)));  // every decade
    }
    for (float x : probes) {
      if (!map->is_signed() && x < 0) continue;  // (quotients of a second moment are never negative)
      const int searched = int(std::upper_bound(sorted, sorted + 256, x) - sorted);
      ASSERT_EQ(count_at_or_below(sorted, x, map->is_signed()), searched)
          << (map->is_signed() ? "signed" : "unsigned") << " map at " << x;
    }
  }
}

TEST(BlockwiseQuantization, RoundTripsWithinHalfAStepOfEachDecade) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::student_t_distribution<float> heavy(2.0f);  // outliers, as Adam's moments have
  for (bool is_signed : {true, false}) {
    const DynamicMap& map = is_signed ? DynamicMap::signed_map() : DynamicMap::unsigned_map();
    for (int64_t n : {kQuantizationBlock, int64_t(1000), int64_t(1)}) {
      for (int kind = 0; kind < 2; ++kind) {
        std::vector<float> x(n), back(n);
        for (float& v : x) {
          v = 1e-3f * (kind ? heavy(rng) : normal(rng));
          if (!is_signed) v = v * v;  // a second moment
        }
        std::vector<uint8_t> codes(n);
        const float scale = quantize_block(x.data(), n, map, codes.data());
        float largest = 0;
        for (float v : x) largest = std::max(largest, std::fabs(v));
        EXPECT_EQ(scale, largest);
        dequantize_block(codes.data(), n, scale, map, back.data());
        double relative_sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double m = std::fabs(x[i]) / scale;
          ASSERT_LE(std::fabs(back[i] - x[i]), allowed_error(m, is_signed ? 7 : 8) * scale * (1 + 1e-6))
              << "value " << x[i] << " of a block scaled by " << scale;
          relative_sum += x[i] != 0 ? std::fabs(back[i] - x[i]) / std::fabs(x[i]) : 0;
        }
        const auto largest_at = std::max_element(x.begin(), x.end(), [](float a, float b) {
          return std::fabs(a) < std::fabs(b);
        });
        EXPECT_EQ(back[largest_at - x.begin()], *largest_at) << "the largest value is exact";
        if (n == kQuantizationBlock && kind == 0) {
          // Normal values spread over two or three decades below their largest: a mean error of a few percent.
          EXPECT_LT(relative_sum / double(n), 0.05);
        }
      }
    }
  }
}

// Stochastic rounding: each code is one of the two around its value, the scale's element stays exact, the
// mean over many draws (streams) is the value (unbiased, to within 4 standard errors), and the draws depend on
// (seed, stream, element) alone: a block quantized from a later start reproduces the same codes.
TEST(BlockwiseQuantization, StochasticRoundingIsUnbiasedAndReproducible) {
  const DynamicMap& map = DynamicMap::signed_map();
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 512;
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  for (int i = 0; i < 4; ++i) x[i] = 0.01f;  // (the block's largest lies beyond the first four: see the end)
  const int draws = 2000;
  std::vector<double> sum(n, 0.0), sum_squares(n, 0.0);
  std::vector<uint8_t> codes(n);
  std::vector<float> back(n);
  float scale = 0;
  for (int d = 0; d < draws; ++d) {
    const StochasticRounding rounding{77, uint64_t(d), 1024};
    scale = quantize_block(x.data(), n, map, codes.data(), &rounding);
    dequantize_block(codes.data(), n, scale, map, back.data());
    for (int64_t i = 0; i < n; ++i) {
      sum[i] += back[i], sum_squares[i] += double(back[i]) * back[i];
      const float lower = map.value(map.nearest(x[i] / scale)), q = back[i] / scale;
      ASSERT_LE(std::fabs(q - x[i] / scale), std::fabs(lower - x[i] / scale) + 0.9f / 64) << "a code next to the value";
    }
  }
  int outside = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double mean = sum[i] / draws, variance = std::max(0.0, sum_squares[i] / draws - mean * mean);
    const double standard_error = std::sqrt(variance / draws);
    outside += std::fabs(mean - x[i]) > 4 * standard_error + 1e-7 * scale;
  }
  EXPECT_LE(outside, 1) << "means off their values by more than 4 standard errors";
  // The same elements from a start 4 later: the codes of elements 4.. equal those above.
  const StochasticRounding whole{5, 9, 1024}, later{5, 9, 1028};
  std::vector<uint8_t> all(n), tail(n - 4);
  quantize_block(x.data(), n, map, all.data(), &whole);
  std::vector<float> shifted(x.begin() + 4, x.end());  // the same largest magnitude, so the same scale
  quantize_block(shifted.data(), n - 4, map, tail.data(), &later);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), all.begin() + 4));
}

TEST(BlockwiseQuantization, ABlockOfZerosStaysZero) {
  std::vector<float> x(300, 0.0f), back(300, 1.0f);
  std::vector<uint8_t> codes(300, 0xaa);
  EXPECT_EQ(quantize_block(x.data(), 300, DynamicMap::signed_map(), codes.data()), 0.0f);
  dequantize_block(codes.data(), 300, 0.0f, DynamicMap::signed_map(), back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(quantization_blocks(2048), 1);
  EXPECT_EQ(quantization_blocks(2049), 2);
  EXPECT_EQ(quantization_blocks(0), 0);
}

}  // namespace
}  // namespace zb
