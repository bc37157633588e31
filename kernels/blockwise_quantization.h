// Block-wise dynamic quantization of optimizer state (Dettmers et al., "8-bit Optimizers via Block-wise
// Quantization", ICLR 2022): a block of values is divided by its largest magnitude and each quotient is
// stored as the 8-bit code of the nearest value of a dynamic map; the block keeps its largest magnitude in
// fp32 to scale back.
//
// The dynamic map spends its codes on magnitudes by decade, as the paper's dynamic tree does: after the sign
// bit (signed maps), a code's leading zeros e say the decade [10^-(e+1), 10^-e]; the bit after them is an
// indicator; the bits left, b = (bits after the sign) - e - 1 of them, place the value linearly on that
// decade's 2^b right-hand points: 10^-e * (0.1 + 0.9 (f + 1) / 2^b), f < 2^b. So 1 is exact (f all ones, e = 0),
// every decade ends where the next begins, the nearest code is within half a step of the decade it falls in,
// and a code of all zeros after the sign is 0. Signed maps (the first moment): 7 bits after the sign, decades
// down to 10^-6. Unsigned maps (the second moment, never negative): 8 bits, decades down to 10^-7.
//
// Rounding: stochastic, between the two codes around a quotient, the upper with probability of the quotient's
// distance from the lower over their gap, so that a stored value is the true one on average. Nearest rounding
// leaves Adam's second moment stuck at a code wherever its change in a step (1 - beta2 = 0.1% of it) is below
// half a code's step (0.35% to 3.5% of the value), so it cannot follow shrinking gradients: on a noisy
// quadratic of 10,001 parameters, 8-bit AdamW's loss after 3,000 steps was 1.83x fp32 AdamW's with nearest
// rounding and 1.007x with stochastic rounding (tests/kernels/optimizer_8bit_test.cc). The uniform numbers
// are Philox's (core/random.h), drawn by (seed, stream, element): the same on every device and rank.
//
// Block size: 2048, the paper's: one fp32 scale a block is 0.002 bytes a parameter, and a block is one GPU
// thread block's work (256 threads, 8 values each); a smaller block (256) would follow outliers more closely at
// 8 times the scales' bytes, which the paper found unnecessary for Adam's moments.
#pragma once

#include <array>
#include <cstdint>

#include "core/host_device.h"

namespace zb {

constexpr int64_t kQuantizationBlock = 2048;

class DynamicMap {
 public:
  static const DynamicMap& signed_map();    // codes for values in [-1, 1]
  static const DynamicMap& unsigned_map();  // codes for values in [0, 1]

  // The value of a code (in [-1, 1]).
  float value(uint8_t code) const { return values_[code]; }
  // The code whose value is nearest to x (x in the map's range; a tie goes to the lower value).
  uint8_t nearest(float x) const;
  // Of the two codes whose values are around x, the upper where u (uniform in [0, 1)) is below x's share of
  // the gap between them, else the lower.
  uint8_t round_stochastically(float x, float u) const;
  bool is_signed() const { return signed_; }
  // The tables, for a device's copy: values by code; the values in increasing order and their codes.
  const float* values() const { return values_.data(); }
  const float* sorted_values() const { return sorted_.data(); }
  const uint8_t* sorted_codes() const { return sorted_codes_.data(); }

 private:
  explicit DynamicMap(bool is_signed);
  bool signed_;
  std::array<float, 256> values_{};  // by code
  // The 256 values in increasing order, their codes, and the midpoints between neighbours, for nearest().
  std::array<float, 256> sorted_{};
  std::array<uint8_t, 256> sorted_codes_{};
  std::array<float, 255> midpoints_{};
};

// A uniform number in [0, 1) from a random word's top 24 bits (exact in fp32): stochastic rounding's.
ZB_HOST_DEVICE inline float rounding_uniform(uint32_t word) { return float(word >> 8) * 0x1.0p-24f; }

// Where the uniform numbers of stochastic rounding come from: value i of a block is element first + i of
// Philox stream `stream` under `seed` (first a multiple of 4: one draw serves four elements).
struct StochasticRounding {
  uint64_t seed = 0, stream = 0, first = 0;
};

// Quantizes n values (n <= kQuantizationBlock) to `codes` with `map`, to the nearest codes or, given
// `stochastic`, stochastically; returns the block's scale, its largest magnitude (0 for a block of zeros,
// whose codes all mean 0). Values must be finite. The largest magnitude is exact either way.
float quantize_block(const float* values, int64_t n, const DynamicMap& map, uint8_t* codes,
                     const StochasticRounding* stochastic = nullptr);
// The values of n codes of a block with `scale`.
void dequantize_block(const uint8_t* codes, int64_t n, float scale, const DynamicMap& map, float* values);

// How many of a map's 256 values, in increasing order (`sorted`), are at or below x. Read off the map's structure
// (see above): |x| in decade e (10^-(e+1) to 10^-e) lies after the 2^b codes of smaller magnitudes (b the
// decade's fraction bits) and after floor((|x| 10^e - 0.1) 2^b / 0.9) of its own; a signed map's negative values
// come first, by decreasing magnitude. That estimate is off by one only where x lies within rounding of a value
// or of a decade's end, so it is checked against the two values around it, and a binary search settles the rest:
// one or two table reads where a search makes eight. Written so that nothing is indexed by a value (on a GPU such
// small arrays would live in local memory): the decade's power of ten is a product, exact.
ZB_HOST_DEVICE inline int count_at_or_below(const float* sorted, float x, bool is_signed) {
  const int bits = is_signed ? 7 : 8;  // after the sign
  const float magnitude = x < 0 ? -x : x;
  int decade = 0;
  float power = 1.0f, top = 1.0f;  // 10^decade; 10^-e
  ZB_UNROLL
  for (int e = 1; e < 8; ++e) {
    top *= 0.1f;  // (an estimate's threshold: its rounding only moves the estimate, which is checked)
    const bool smaller = e < bits && magnitude <= top;
    decade += smaller ? 1 : 0;
    power = smaller ? power * 10.0f : power;
  }
  const int steps = 1 << (bits - 1 - decade);
  const float position = (magnitude * power - 0.1f) * float(steps) / 0.9f;
  const int within = position > 0 ? (position < float(steps) ? int(position) : steps) : 0;
  const int counted = steps + within;  // magnitude codes at or below |x|, the zero code's included
  const int estimate = !is_signed ? counted : x < 0 ? 128 - counted : 128 + counted;
  if ((estimate == 0 || sorted[estimate - 1] <= x) && (estimate == 256 || x < sorted[estimate])) return estimate;
  int low = 0, high = 256;
  while (low < high) {
    const int middle = (low + high) / 2;
    if (sorted[middle] <= x) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

// Blocks of kQuantizationBlock over n values: how many (the last may be partial).
inline int64_t quantization_blocks(int64_t n) { return (n + kQuantizationBlock - 1) / kQuantizationBlock; }

}  // namespace zb
