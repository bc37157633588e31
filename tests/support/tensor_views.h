// Host tensors for tests: std::vector storage viewed as zb::Tensor, and norm-wise comparisons.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/tensor.h"

namespace zb::test {

inline Tensor view(std::vector<double>& v, Shape s) { return Tensor(v.data(), s, DType::f64, Device::cpu()); }
inline Tensor view(std::vector<float>& v, Shape s) { return Tensor(v.data(), s, DType::f32, Device::cpu()); }
inline Tensor view(std::vector<int32_t>& v, Shape s) { return Tensor(v.data(), s, DType::i32, Device::cpu()); }
inline Tensor view(const std::vector<int32_t>& v) {
  return Tensor(const_cast<int32_t*>(v.data()), Shape{int64_t(v.size())}, DType::i32, Device::cpu());
}

// ||a - b|| / ||b||; infinity when any element of a is NaN (NaN never passes) or the sizes differ.
template <typename A, typename B>
double relative_error(const std::vector<A>& a, const std::vector<B>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(double(a[i]))) return std::numeric_limits<double>::infinity();
    diff += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    ref += double(b[i]) * double(b[i]);
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-300);
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace zb::test
