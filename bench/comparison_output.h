// What a comparison leaves in --output-dir and on the console: the results as JSON (an array of records)
// and CSV, a chart of throughput and GPU peak memory, ds_config_<base name>.json (a DeepSpeed config of the
// recommended configuration), each written atomically (a temporary file, then a rename, so that no partial
// file is ever left behind), and the summary table.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/atomic_file.h"
#include "bench/bench_record.h"
#include "bench/deepspeed_config.h"
#include "engine/trainer.h"

namespace zb {

struct ComparisonFiles {
  std::string json, csv, chart, recommended_config;  // paths written (recommended_config: empty without one)
};

// The files' common path, output_dir/stem_<UTC timestamp, to the second> (stem: "zero_comparison" or
// "offload_comparison"), with _2, _3, ... where a run has that name already: the name is claimed by creating
// <base>.json (holding an empty array) only if it does not exist, so two runs never share one, even when they
// start in the same second. Called once per run (by the rank that writes); rewriting after each configuration
// replaces the run's own files. Throws IoError when the folder cannot be written.
std::string reserve_comparison_base(const std::string& output_dir, const std::string& stem);
// base + .json, .csv and .svg, and ds_config_<base's file name>.json beside them when `recommended` (the
// optimal configuration's options) is given: every file of a run carries its name, so no run's file is left to
// pass for another's.
ComparisonFiles write_comparison(const std::string& base, const std::string& title,
                                 const std::vector<BenchRecord>& records, const TrainingOptions* recommended,
                                 std::optional<double> gpu_capacity_gb, bool on_gpu);

// One of our configurations as DeepSpeed settings (deepspeed_config_json writes them): the nearest DeepSpeed
// takes where it cannot express the configuration (deepspeed_caveat says what differs).
DeepSpeedConfig deepspeed_settings(const TrainingOptions& options);

// What DeepSpeed cannot express of a configuration, for a note beside ds_config_recommended.json (empty when
// the config says all of it): optimizer offload in stage 0, parameter offload below stage 3.
std::string deepspeed_caveat(const TrainingOptions& options);

// Strategy | GPU Mem | CPU Mem | Time | Throughput | [Rank spread] | Status | Recommendation, one line a
// configuration; Rank spread (the larger of the step and busy spreads, see rank_results.h) where a record has
// several ranks, "SLOW rank N" beside it above kRankSpreadFlagPct. GPU Mem is the largest over the ranks
// ("Device Mem" on the CPU backend, whose device is the host).
std::string summary_table(const std::vector<BenchRecord>& records, bool on_gpu);

}  // namespace zb
