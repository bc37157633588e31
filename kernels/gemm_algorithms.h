// How the GPU backend picks a cuBLASLt algorithm for each GEMM shape: `timed` runs the heuristic's first
// candidates on the shape's first use and keeps the fastest (docs/PERFORMANCE.md has what it gains);
// `heuristic` takes the heuristic's first, as cuBLAS does. The environment variable ZB_GEMM_ALGORITHMS picks;
// timed by default. A timed choice is kept for the process, so repeated runs in one process compute alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zb {

enum class GemmAlgorithms { timed, heuristic };

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

// ZB_GEMM_ALGORITHMS's value, or timed when it is unset or empty; UsageError naming the variable otherwise.
GemmAlgorithms gemm_algorithms_from_environment();

// Where a linear layer's backward runs its weight-gradient GEMM: `concurrent` on a second stream beside the
// input-gradient GEMM (and the bias gradient's reduction), so that one fills the multiprocessors the other
// leaves idle (a 768 x 768 weight gradient is 36 output tiles for 132 of them); `serial` after it, on the one
// stream. The environment variable ZB_WEIGHT_GRADIENTS picks; concurrent by default. The results are the same
// bits either way: the two GEMMs write different tensors.
enum class WeightGradients { concurrent, serial };

// ZB_WEIGHT_GRADIENTS's value, or concurrent when it is unset or empty; UsageError naming the variable otherwise.
WeightGradients weight_gradients_from_environment();

}  // namespace zb
