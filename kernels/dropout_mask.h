// Dropout's mask, one rule for every backend: element i of a tensor masked under (seed, stream) is kept when
// word i % 4 of Philox(seed, stream, i / 4) (core/random.h) is at least p 2^32, so the CPU and the GPU drop the
// same elements, and a backward that draws again with the same arguments finds the forward's mask. Callers keep
// their streams apart from the weight initialisation's ((unit << 16) | tensor) by kDropoutStreams.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/random.h"

namespace zb {

// Set in every dropout stream: no other draw of a run (initialisation, tokens, stochastic rounding) uses it.
constexpr uint64_t kDropoutStreams = uint64_t(1) << 63;

// The words below it drop their element: p 2^32, at most 2^32 - 1.
ZB_HOST_DEVICE inline uint32_t dropout_threshold(double p) {
  const double scaled = p * 4294967296.0;
  return scaled >= 4294967295.0 ? 4294967295u : static_cast<uint32_t>(scaled);
}

ZB_HOST_DEVICE inline bool dropout_keeps(uint64_t seed, uint64_t stream, uint64_t index, uint32_t threshold) {
  return random_words(seed, stream, index / 4)[index % 4] >= threshold;
}

}  // namespace zb
