// Test data for the communicator tests: values that depend on both the rank and the index (so a wrong
// slice or a wrong rank order changes them), and a hash of a buffer's bits, for checking that every rank
// holds the same bits.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/bf16.h"
#include "core/dtype.h"

namespace zb::test {

// Non-trivial values for host tests: sums of them round, so they are compared with a tolerance.
template <typename T>
T host_value(int rank, int64_t index) {
  return T(1) + T(rank + 1) * T(0.1234567) + T(index % 13) * T(0.0078125) + T(1) / T(index + 3);
}

// Values for device tests: multiples of 1/4 in [-2, 5], exact in bf16, and so are sums of up to 32 of
// them; results are compared exactly in f32 and bf16 alike.
inline float device_value(int rank, int64_t index) {
  return 0.25f * float((5 * rank + 3 * index + 1) % 29) - 2.0f;
}

// FNV-1a over the bytes.
inline uint64_t bits_hash(const void* data, size_t bytes) {
  uint64_t hash = 1469598103934665603ull;
  const auto* byte = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ byte[i]) * 1099511628211ull;
  return hash;
}

// Host bytes of `values` in dtype f32 or bf16.
inline std::vector<uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16_bits(values[i]);
  return bits;
}

// Whether every element is within `relative` of the expected one (0: equal; NaN never is). On failure,
// says how many are not and which is the first, instead of one message per element.
template <typename T>
::testing::AssertionResult all_close(const std::vector<T>& actual, const std::vector<T>& expected,
                                     double relative) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << actual.size() << " elements, expected " << expected.size();
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double difference = std::abs(double(actual[i]) - double(expected[i]));
    if (difference <= relative * std::abs(double(expected[i]))) continue;
    if (wrong++ == 0) first = i;
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << wrong << " of " << actual.size() << " elements differ; the first is "
                                       << first << ": " << actual[first] << ", expected " << expected[first];
}

}  // namespace zb::test
