// Central finite differences in double precision: the oracle for every backward kernel.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace zb::test {

// Compares analytic[i] with (loss(x + h e_i) - loss(x - h e_i)) / 2h for every element of x. The tolerance is
// far below what a wrong index, a missing term or a wrong sign produce (errors of order the gradient itself),
// and far above the difference quotient's own error in double (about 1e-10 here).
inline void expect_gradient_matches(std::vector<double>& x, const std::vector<double>& analytic,
                                    const std::function<double()>& loss, const std::string& name,
                                    double tolerance = 1e-7) {
  ASSERT_EQ(x.size(), analytic.size()) << name;
  const double h = 1e-5;
  int failures = 0;
  for (size_t i = 0; i < x.size() && failures < 5; ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2 * h);
    const double bound = tolerance * std::max(1.0, std::abs(numeric));
    if (!(std::abs(analytic[i] - numeric) <= bound)) {
      ++failures;
      ADD_FAILURE() << name << "[" << i << "]: analytic " << analytic[i] << " vs finite difference " << numeric;
    }
  }
}

}  // namespace zb::test
