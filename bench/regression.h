// Regression mode, for GPU CI runners: this run's records against a saved results file. A configuration
// (same stage, strategy, model, world size, batch, sequence length, accumulation and dtype) regresses when
// its throughput fell, or its GPU peak memory rose, by more than the allowed percentage; one that succeeded
// in the baseline and fails now regresses too.
#pragma once

#include <string>
#include <vector>

#include "bench/bench_record.h"

namespace zb {

// Each regression as a line that names the configuration, the metric and both values. Configurations absent
// from the baseline are not compared. Throws UsageError when the file is unreadable or not a results array.
std::vector<std::string> find_regressions(const std::vector<BenchRecord>& current, const std::string& baseline_path,
                                          double max_regression_percent);

}  // namespace zb
