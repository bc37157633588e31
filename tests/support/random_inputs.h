// Fresh random test inputs. Each test draws from a new seed (printed on failure through the returned
// trace) so that a kernel must be right on any input, and a failure can still be replayed with ZB_TEST_SEED.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace zb::test {

inline uint64_t fresh_seed() {
  if (const char* fixed = std::getenv("ZB_TEST_SEED")) return std::strtoull(fixed, nullptr, 10);
  return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
}

class RandomInputs {
 public:
  explicit RandomInputs(uint64_t seed = fresh_seed()) : seed_(seed), engine_(seed) {}
  uint64_t seed() const { return seed_; }
  std::string trace() const { return "ZB_TEST_SEED=" + std::to_string(seed_); }

  template <typename T = double>
  std::vector<T> normal(size_t n, double std = 1.0, double mean = 0.0) {
    std::normal_distribution<double> dist(mean, std);
    std::vector<T> v(n);
    for (auto& x : v) x = T(dist(engine_));
    return v;
  }
  template <typename T = double>
  std::vector<T> uniform(size_t n, double lo, double hi) {
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<T> v(n);
    for (auto& x : v) x = T(dist(engine_));
    return v;
  }
  std::vector<int32_t> ids(size_t n, int32_t bound) {
    std::uniform_int_distribution<int32_t> dist(0, bound - 1);
    std::vector<int32_t> v(n);
    for (auto& x : v) x = dist(engine_);
    return v;
  }

 private:
  uint64_t seed_;
  std::mt19937_64 engine_;
};

}  // namespace zb::test
