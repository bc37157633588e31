#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zb {

// How timed choices among a library's candidates went (cuBLASLt's algorithms, cuDNN's attention plans), for
// the programs' report: shapes timed, how many of them took another candidate than the heuristic's first, and
// the time those saved (one run of each such shape, ms).
struct TimingSummary {
  int64_t shapes_timed = 0, shapes_changed = 0;
  double ms_saved_per_run = 0;
  // One shape's choice: `chosen` of the candidates whose times are `ms` (candidate 0: the heuristic's first).
  void record(const std::vector<float>& ms, size_t chosen) {
    ++shapes_timed;
    if (chosen == 0) return;
    ++shapes_changed;
    ms_saved_per_run += ms[0] - ms[chosen];
  }
};

}  // namespace zb
