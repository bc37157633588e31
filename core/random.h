// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11). Value i of stream s under seed k
// depends only on (k, s, i), never on how many values were drawn before. So any slice of a tensor can be
// generated on its own, by any rank or any device, and a model initialised whole or shard by shard gets
// the same numbers.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace zb {

ZB_HOST_DEVICE inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * counter[0];
    uint64_t p1 = static_cast<uint64_t>(kMul1) * counter[2];
    counter = {static_cast<uint32_t>(p1 >> 32) ^ counter[1] ^ key[0], static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ counter[3] ^ key[1], static_cast<uint32_t>(p0)};
    key = {key[0] + kWeyl0, key[1] + kWeyl1};
  }
  return counter;
}

// Four independent 32-bit words for element `index` of `stream`.
ZB_HOST_DEVICE inline std::array<uint32_t, 4> random_words(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(stream),
                     static_cast<uint32_t>(stream >> 32)},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// Uniform in (0, 1]: never 0, so that log() is safe.
ZB_HOST_DEVICE inline double uniform_open_closed(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);  // 53 random bits
  return (static_cast<double>(bits & ((1ull << 53) - 1)) + 1.0) * 0x1.0p-53;
}

// A standard normal value (Box-Muller on the first two uniforms).
ZB_HOST_DEVICE inline double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  auto w = random_words(seed, stream, index);
  double u1 = uniform_open_closed(w[0], w[1]);
  double u2 = uniform_open_closed(w[2], w[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// A uniform integer in [0, bound): a 32-bit random word scaled by bound (bias below bound / 2^32).
ZB_HOST_DEVICE inline uint32_t random_below(uint64_t seed, uint64_t stream, uint64_t index, uint32_t bound) {
  return static_cast<uint32_t>((static_cast<uint64_t>(random_words(seed, stream, index)[0]) * bound) >> 32);
}

}  // namespace zb
