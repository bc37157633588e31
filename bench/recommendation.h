// The recommendation users already apply to these comparisons: among the configurations that succeeded,
// the highest throughput is OPTIMAL, unless others are within its noise (their throughputs differ by less
// than the larger relative standard deviation of the two runs' step times): those are a tie, and the
// simplest of them (no offload before offload, then the lower stage) that does not barely fit is OPTIMAL;
// each other one says why not (how much slower, how much more or less
// GPU memory); a configuration above 90% of the GPU's memory is flagged as barely fitting; those that failed
// say how and why: "does not fit: <the first line of the out-of-memory message>", "error: <its first line>".
#pragma once

#include <optional>
#include <vector>

#include "bench/bench_record.h"

namespace zb {

// Fills each record's `recommendation`; returns the index of the optimal one (none when nothing succeeded).
// gpu_capacity_gb: the GPU's memory (absent on the CPU backend: nothing is flagged as barely fitting).
std::optional<size_t> recommend(std::vector<BenchRecord>& records, std::optional<double> gpu_capacity_gb);

}  // namespace zb
