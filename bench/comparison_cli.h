// The command line of zero_bench and offload_bench (Boost.Program_options): the flags and defaults of the
// Python suite they replace, validated into a plan (the configurations to run, the settings, the outputs)
// before any work starts. Bad input is a UsageError naming the flag (exit code 2).
#pragma once

#include <boost/program_options.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_runner.h"
#include "bench/cli.h"

namespace zb {

enum class ComparisonKind { zero_stages, offload_strategies };

// The runner's flags, shared by zero_bench, offload_bench and sweep.
struct RunnerFlags {
  int64_t warmup_steps = 5;
  std::string output_dir = "results";
  int64_t repeat = 1;
  double gpu_hour_usd = 0;  // 0: no cost column
  double peak_tflops = 0;   // 0: from the GPU's name
  double agreement_timeout_s = 600;
  std::string inject_failure;  // tests: "RANK:CONFIGURATION:STEP"
};

// --warmup-steps, --repeat, --output-dir (its help naming the files `outputs` describes), --gpu-hour-usd,
// --peak-tflops, --agreement-timeout-s and --inject-failure.
void add_runner_flags(boost::program_options::options_description& options, RunnerFlags& flags,
                      const std::string& outputs);

// --lr, --grad-clip, --device, --seed, --data and --data-format: the training flags the programs that run several
// configurations share.
void add_run_flags(boost::program_options::options_description& options, TrainingFlags& flags);

// The token files `settings` name, checked as train checks them (they match, their headers, lengths and first
// file's ids), before any configuration runs: a bad file named on the command line is bad input (UsageError), not a
// failed run. Every configuration reads the same files with the same shape: `options` is any of them.
void check_token_files(const TrainingOptions& options, const BenchSettings& settings, const MpiWorld& world);

// Whether `flag` was on the command line (not its default): what a config file may not replace.
bool given(const boost::program_options::variables_map& vm, const char* flag);

// The runner's settings for a validated run; throws UsageError naming the runner's flag that is out of range, and
// --device-memory-limit-gb, --profile-dir, ... as validate_training_flags checked them.
BenchSettings runner_settings(const RunnerFlags& flags, const TrainingRun& run);

// --device as given, or "cuda:0" where it was not and a GPU is visible; without one, a UsageError that shows the
// program's CPU form ("cuda" is "cuda:0": each rank's own GPU is chosen later).
std::string program_device(const std::string& device, const char* program);

struct ComparisonFlags {
  TrainingFlags training;  // --model, --batch-size, ... as `train` has them (defaults below)
  RunnerFlags runner;
  std::string config;    // a DeepSpeed JSON config
  std::string baseline;  // a results file to compare with (regression mode)
  double max_regression = 5;
  std::vector<int> stages{0, 1, 2, 3};  // zero_bench
  std::vector<std::string> strategies;  // offload_bench
  std::string config_strategy;          // offload_bench: a partial optimizer offload from --config (NAME:RATIO)
  int stage = -1;                       // offload_bench (-1: by strategy)
  std::vector<std::string> checkpointing{"none"};  // activation checkpointing modes, each with every stage or strategy
};

void add_comparison_flags(boost::program_options::options_description& options, ComparisonFlags& flags,
                          ComparisonKind kind);

struct ComparisonPlan {
  ComparisonKind kind = ComparisonKind::zero_stages;
  BenchSettings settings;
  std::vector<TrainingOptions> configurations;
  std::string output_dir;
  std::string baseline;
  double max_regression = 5;
  std::string title;  // of the chart and the console summary
};

// Validates everything (the output folder is created and must be writable) before any training.
// `given` tells which flags were on the command line: a --config value replaces only defaults. `world`: the
// job's ranks (GPUs), by which a --config's global batch becomes a micro-batch and accumulation.
ComparisonPlan plan_comparison(ComparisonFlags flags, const boost::program_options::variables_map& given,
                               ComparisonKind kind, int world);

}  // namespace zb
