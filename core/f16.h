// IEEE half precision (fp16) on the host, as raw 16-bit patterns: conversions with round-to-nearest-even,
// subnormals, and infinity beyond the largest finite value (65504), as the GPU's __float2half_rn does; for
// tests, for the CPU optimizer's scalar path and for preparing device data.
#pragma once

#include <cstdint>
#include <cstring>

namespace zb {

inline uint16_t float_to_f16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity, or NaN (kept a quiet NaN)
    return uint16_t(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
  }
  const int exponent = int(magnitude >> 23) - 127 + 15;  // the half's biased exponent
  if (exponent >= 31) return uint16_t(sign | 0x7c00u);  // beyond fp16's range: infinity
  if (exponent <= 0) {
    // A subnormal half (or zero): the mantissa with its implicit bit, shifted right and rounded to nearest even.
    if (exponent < -10) return sign;
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const int shift = 14 - exponent;
    const uint32_t half_ulp = 1u << (shift - 1), rest = mantissa & ((1u << shift) - 1);
    uint32_t result = mantissa >> shift;
    if (rest > half_ulp || (rest == half_ulp && (result & 1u))) ++result;
    return uint16_t(sign | result);
  }
  // A normal half: drop 13 mantissa bits, rounding to nearest even (a carry may reach the exponent, even to
  // infinity, which is the right answer there).
  uint32_t result = (uint32_t(exponent) << 10) | ((magnitude >> 13) & 0x3ffu);
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;
  return uint16_t(sign | result);
}

inline float f16_bits_to_float(uint16_t half) {
  const uint32_t sign = uint32_t(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu, mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int shift = 0;
    uint32_t m = mantissa;
    while (!(m & 0x400u)) m <<= 1, ++shift;
    bits = sign | (uint32_t(127 - 15 - shift + 1) << 23) | ((m & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// The value a float becomes after a round trip through fp16.
inline float round_to_f16(float value) { return f16_bits_to_float(float_to_f16_bits(value)); }

}  // namespace zb
