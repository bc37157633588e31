// bfloat16 on the host, as raw 16-bit patterns: conversions with round-to-nearest-even (what the GPU's
// __float2bfloat16 does), for tests and for preparing device data.
#pragma once

#include <cstdint>
#include <cstring>

namespace zb {

inline uint16_t float_to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return uint16_t((bits >> 16) | 0x40);  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

inline float bf16_bits_to_float(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

// The value a float becomes after a round trip through bf16.
inline float round_to_bf16(float value) { return bf16_bits_to_float(float_to_bf16_bits(value)); }

}  // namespace zb
