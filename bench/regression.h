// Regression mode, for GPU CI runners: this run's records against a saved results file. A configuration
// (same stage, strategy, model, world size, batch, sequence length, accumulation, dtype and activation
// checkpointing) regresses when
// its throughput fell by more than both the allowed percentage and the noise of the two runs (the larger
// relative standard deviation of their step times), or its GPU peak memory (counted, not timed) rose by more
// than the allowed percentage; one that succeeded in the baseline and fails now regresses too.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/bench_record.h"
#include "engine/trainer.h"

namespace zb {

// The identity of a configuration across runs: "model stage S strategy world W batch B seq T accum A dtype",
// and " ckpt MODE" with activation checkpointing, " OPTIMIZER" with another optimizer than adamw (a record without
// those fields, from before they existed, ran none and adamw).
std::string configuration_key(const std::string& model, int stage, const std::string& strategy, int world,
                              int64_t batch, int64_t seq, int64_t grad_accum, const std::string& dtype,
                              const std::string& checkpointing = "none", const std::string& optimizer = "adamw",
                              const std::string& lora = "none");
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

  // One configuration found on both sides.
  struct Row {
    std::string key;
    std::optional<double> baseline_tokens_per_sec, now_tokens_per_sec, baseline_peak_gb, now_peak_gb;
    double noise_pct = 0;  // the larger relative step-time standard deviation of the two runs, in percent
    std::string verdict;   // "ok", "REGRESSION: ..." (what regressed)
  };
  struct Report {
    std::vector<std::string> regressions;              // each names the configuration, the metric and both values
    std::vector<std::string> only_now, only_baseline;  // configurations on one side only (keys)
    std::vector<Row> rows;
  };
  Report compare(const std::vector<BenchRecord>& current, double max_regression_percent) const;
  // The report as a Markdown summary for a CI job's page: a table of configuration, baseline, now, change,
  // noise and verdict, then the configurations on one side only.
  std::string markdown(const Report& report, double max_regression_percent) const;

 private:
  std::string path_;
  nlohmann::json records_;
};

}  // namespace zb
