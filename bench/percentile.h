// Order statistics of measured values (step times, clocks, repeats of a run).
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace zb {

// The value at `fraction` (0.5: the median) of non-empty `values`, interpolating linearly between neighbours.
inline double percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const double position = fraction * double(values.size() - 1);
  const size_t below = size_t(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (position - double(below)) * (values[above] - values[below]);
}

inline double median(std::vector<double> values) { return percentile(std::move(values), 0.5); }

}  // namespace zb
