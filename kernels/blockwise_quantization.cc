#include "kernels/blockwise_quantization.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "core/random.h"

namespace zb {

namespace {

// The magnitude a code's bits after the sign stand for, `bits` of them (see the header).
float magnitude_of(uint32_t rest, int bits) {
  if (rest == 0) return 0.0f;
  int zeros = 0;
  while (!(rest & (1u << (bits - 1 - zeros)))) ++zeros;
  const int fraction_bits = bits - zeros - 1;
  const uint32_t fraction = rest & ((1u << fraction_bits) - 1);
  const double decade = std::pow(10.0, -zeros);
  return float(decade * (0.1 + 0.9 * double(fraction + 1) / double(1u << fraction_bits)));
}

}  // namespace

DynamicMap::DynamicMap(bool is_signed) : signed_(is_signed) {
  for (uint32_t code = 0; code < 256; ++code) {
    if (is_signed) {
      const float magnitude = magnitude_of(code & 0x7fu, 7);
      values_[code] = (code & 0x80u) ? -magnitude : magnitude;
    } else {
      values_[code] = magnitude_of(code, 8);
    }
  }
  std::array<uint8_t, 256> order{};
  std::iota(order.begin(), order.end(), 0);
  // Stable, so that of the two codes of 0 in a signed map (+0 and -0) the first, +0 (code 0), comes first.
  std::stable_sort(order.begin(), order.end(), [&](uint8_t a, uint8_t b) { return values_[a] < values_[b]; });
  for (int i = 0; i < 256; ++i) sorted_[i] = values_[order[i]], sorted_codes_[i] = order[i];
  for (int i = 0; i < 255; ++i) midpoints_[i] = 0.5f * (sorted_[i] + sorted_[i + 1]);
}

const DynamicMap& DynamicMap::signed_map() {
  static const DynamicMap map(true);
  return map;
}

const DynamicMap& DynamicMap::unsigned_map() {
  static const DynamicMap map(false);
  return map;
}

uint8_t DynamicMap::nearest(float x) const {
  // The first midpoint at or above x: x is nearest to the value below it (ties to the smaller value; for
  // negative x that is the larger magnitude, so a tie at -m goes down, at +m down too: both toward -inf).
  const auto it = std::lower_bound(midpoints_.begin(), midpoints_.end(), x);
  return sorted_codes_[size_t(it - midpoints_.begin())];
}

uint8_t DynamicMap::round_stochastically(float x, float u) const {
  // The last value at or below x, and the one above it.
  const int above = count_at_or_below(sorted_.data(), x, signed_);
  if (above == 0) return sorted_codes_.front();
  if (above == 256) return sorted_codes_.back();
  const size_t upper = size_t(above), lower = upper - 1;
  const float share = (x - sorted_[lower]) / (sorted_[upper] - sorted_[lower]);
  return u < share ? sorted_codes_[upper] : sorted_codes_[lower];
}

float quantize_block(const float* values, int64_t n, const DynamicMap& map, uint8_t* codes,
                     const StochasticRounding* stochastic) {
  ZB_CHECK(n >= 0 && n <= kQuantizationBlock, "a quantization block holds at most ", kQuantizationBlock, " values");
  float scale = 0.0f;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(values[i]));
  const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
  if (!stochastic) {
    for (int64_t i = 0; i < n; ++i) codes[i] = map.nearest(values[i] * inverse);
    return scale;
  }
  // One Philox draw gives four uniform numbers: for four consecutive elements, from a multiple of 4.
  ZB_CHECK(stochastic->first % 4 == 0, "stochastic rounding starts at a multiple of 4 elements");
  for (int64_t i = 0; i < n; i += 4) {
    const uint64_t group = (stochastic->first + uint64_t(i)) / 4;
    const std::array<uint32_t, 4> words = random_words(stochastic->seed, stochastic->stream, group);
    for (int64_t k = 0; k < 4 && i + k < n; ++k) {
      const float u = rounding_uniform(words[size_t(k)]);
      const float x = values[i + k] * inverse;
      // The largest magnitude maps to an end code exactly (x is +-1 up to rounding): kept exact.
      codes[i + k] = std::fabs(values[i + k]) == scale ? map.nearest(x) : map.round_stochastically(x, u);
    }
  }
  return scale;
}

void dequantize_block(const uint8_t* codes, int64_t n, float scale, const DynamicMap& map, float* values) {
  for (int64_t i = 0; i < n; ++i) values[i] = map.value(codes[i]) * scale;
}

}  // namespace zb
