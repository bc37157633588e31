// Regression mode, for GPU CI runners: this run's records against a saved results file. A configuration
// (same stage, strategy, model, world size, batch, sequence length, accumulation and dtype) regresses when
// its throughput fell, or its GPU peak memory rose, by more than the allowed percentage; one that succeeded
// in the baseline and fails now regresses too.
#pragma once

#include <string>
#include <vector>

#include "bench/bench_record.h"
#include "engine/trainer.h"

namespace zb {

// The identity of a configuration across runs: "model stage S strategy world W batch B seq T accum A dtype".
std::string configuration_key(const std::string& model, int stage, const std::string& strategy, int world,
                              int64_t batch, int64_t seq, int64_t grad_accum, const std::string& dtype);
std::string configuration_key(const TrainingOptions& options, int world);

// A baseline file, read and checked: a non-empty JSON array of records, each holding the fields that identify
// its configuration and those compared. Throws UsageError naming --baseline and what is wrong otherwise.
class Baseline {
 public:
  explicit Baseline(const std::string& path);
  const std::string& path() const { return path_; }
  std::vector<std::string> keys() const;
  // Throws UsageError when none of `planned` (configuration keys) is in the baseline: a run that could not
  // be compared with it at all (another model, shape, world size) is a mistake, not "no regression".
  void require_shared(const std::vector<std::string>& planned) const;

  struct Report {
    std::vector<std::string> regressions;  // each names the configuration, the metric and both values
    std::vector<std::string> only_now, only_baseline;  // configurations on one side only (keys)
  };
  Report compare(const std::vector<BenchRecord>& current, double max_regression_percent) const;

 private:
  std::string path_;
  nlohmann::json records_;
};

}  // namespace zb
