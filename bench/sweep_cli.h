// The command line of `sweep`: the axes of the profiling matrix (each a list; the cross product runs), the runner's
// and the training's other flags as zero_bench has them, and --config, a profiling matrix's JSON (flags given on the
// command line win). Validated into a plan, every configuration checked, before any work starts: bad input is a
// UsageError naming the flag (exit code 2).
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "bench/bench_runner.h"
#include "bench/comparison_cli.h"
#include "bench/sweep_plan.h"

namespace zb {

struct SweepFlags {
  SweepAxes axes;
  TrainingFlags training;  // the flags no axis varies (--lr, --seed, --device, the ZeRO knobs, ...)
  RunnerFlags runner;
  std::string config;               // a profiling matrix's JSON
  std::vector<std::string> gather;  // --gather DIR...: merge the profiles found there instead of running
};

void add_sweep_flags(boost::program_options::options_description& options, SweepFlags& flags);

struct SweepPlan {
  SweepAxes axes;
  std::vector<SweepPoint> points;               // in the order they run
  std::vector<TrainingOptions> configurations;  // one a point
  BenchSettings settings;
  std::string output_dir;
  std::string nvme_path;  // where the profile measures the NVMe's rates (empty: not measured)
  // What the axes name that is not run: "gpt2: seq 2048 exceeds its maximum of 1024 (4 configuration(s) left out)".
  std::vector<std::string> left_out;
};

// `given` tells which flags were on the command line (a --config value replaces only the others); `world`: the
// job's ranks.
SweepPlan plan_sweep(SweepFlags flags, const boost::program_options::variables_map& given, int world);

}  // namespace zb
