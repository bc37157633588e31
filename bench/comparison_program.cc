#include "bench/comparison_program.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>

#include "bench/comparison_output.h"
#include "bench/progress_line.h"
#include "bench/recommendation.h"
#include "bench/regression.h"
#include "bench/run_environment.h"
#include "core/strings.h"
#include "offload/removal_on_termination.h"

namespace zb {

namespace {

// Set by the first Ctrl-C (see stop_gracefully_on_interrupt): a signal handler can only reach a static.
volatile std::sig_atomic_t interrupt_requested = 0;

int compare(MpiWorld& world, ComparisonFlags flags, const boost::program_options::variables_map& vm,
            ComparisonKind kind) {
  ComparisonPlan plan = plan_comparison(flags, vm, kind, world.size());
  plan.settings.device = device_for_rank(plan.settings.device, world);
  for (TrainingOptions& options : plan.configurations) options.ranks_per_host = world.local_size();
  check_token_files(plan.configurations.front(), plan.settings, world);
  // A baseline is read and checked before any work: readable, results, and sharing a configuration with the run.
  std::optional<Baseline> baseline;
  if (!plan.baseline.empty()) {
    baseline.emplace(plan.baseline);
    std::vector<std::string> planned;
    for (const TrainingOptions& options : plan.configurations)
      planned.push_back(configuration_key(options, world.size()));
    baseline->require_shared(planned);
  }
  const bool printer = world.rank() == 0;
  stop_gracefully_on_interrupt(&interrupt_requested);

  BenchRunner runner(world, plan.settings);
  const RunEnvironment environment = describe_environment(world, plan.settings.device, plan.settings.backend_options);
  const std::optional<double> capacity = device_capacity_gb(plan.settings.device);
  if (printer) {
    std::printf("%s\n%s on %s | %s | %d configuration(s), %lld warm-up + %lld timed steps each, repeated %lld\n",
                plan.title.c_str(), runner.communicator_description().c_str(), environment.gpu_name.c_str(),
                environment.host_name.c_str(), int(plan.configurations.size()), (long long)plan.settings.warmup_steps,
                (long long)plan.settings.num_steps, (long long)plan.settings.repeat);
    std::fflush(stdout);
  }

  ProgressLine progress_line(printer);
  const int count = int(plan.configurations.size());
  const int64_t steps_each = plan.settings.repeat * (plan.settings.warmup_steps + plan.settings.num_steps);
  std::vector<BenchRecord> records;
  std::vector<const TrainingOptions*> options_of;
  // Written (rank 0) after every configuration, so that a job that has to end loses nothing that finished.
  const std::string base =
      printer ? reserve_comparison_base(plan.output_dir,
                                        kind == ComparisonKind::zero_stages ? "zero_comparison" : "offload_comparison")
              : std::string();
  auto write_results = [&] {
    const std::optional<size_t> best = recommend(records, capacity);
    return write_comparison(base, plan.title, records, best ? options_of[*best] : nullptr, capacity,
                            plan.settings.device.is_cuda());
  };
  bool interrupted = false;
  for (int i = 0; i < count; ++i) {
    const TrainingOptions& options = plan.configurations[size_t(i)];
    const bool names_strategy = kind == ComparisonKind::offload_strategies;
    RunProgress progress{
        i + 1, count, 0, 0,
        configuration_label(options.zero.stage, offload_spec_name(options.offload, options.offload_ratio),
                            names_strategy, std::string(activation_checkpointing_name(options.activation_checkpointing)))};
    BenchRecord record = runner.run(
        options, progress, [] { return interrupt_requested != 0; },
        [&](const RunProgress& p) { progress_line.show(p, i * steps_each + p.step, count * steps_each); });
    if (record.status == "interrupted") {
      interrupted = true;
      break;  // what has finished is written below; the interrupted configuration is not a result
    }
    record.environment = environment;
    record.names_strategy = names_strategy;
    if (capacity) record.gpu_capacity_gb = capacity;
    records.push_back(std::move(record));
    options_of.push_back(&options);
    if (printer) write_results();
  }
  progress_line.finish();

  const std::optional<size_t> best = recommend(records, capacity);
  int exit_code = interrupted ? 130 : 0;
  if (printer) {
    const ComparisonFiles files = write_results();
    std::printf("\n%s\nresults: %s, %s\nchart: %s\n", summary_table(records, plan.settings.device.is_cuda()).c_str(),
                files.json.c_str(), files.csv.c_str(), files.chart.c_str());
    if (!files.recommended_config.empty()) {
      std::printf("recommended (%s): %s\n", records[*best].label().c_str(), files.recommended_config.c_str());
      const std::string caveat = deepspeed_caveat(*options_of[*best]);
      if (!caveat.empty()) std::printf("note: %s\n", caveat.c_str());
    }
    if (interrupted) std::printf("interrupted: %zu of %d configuration(s) finished\n", records.size(), count);
    if (baseline) {
      const Baseline::Report report = baseline->compare(records, plan.max_regression);
      for (const std::string& key : report.only_now)
        std::printf("not in the baseline (not compared): %s\n", key.c_str());
      for (const std::string& key : report.only_baseline) std::printf("in the baseline only: %s\n", key.c_str());
      for (const std::string& line : report.regressions) std::printf("REGRESSION: %s\n", line.c_str());
      if (report.regressions.empty()) std::printf("no regression against %s\n", plan.baseline.c_str());
      const std::string summary = base + "_regression.md";  // for a CI job's page
      write_file_atomically(summary, baseline->markdown(report, plan.max_regression));
      std::printf("regression summary (Markdown): %s\n", summary.c_str());
      if (!report.regressions.empty() && exit_code == 0) exit_code = 1;
    }
    std::fflush(stdout);
  }
  return int(runner.agreement().max(double(exit_code)));
}

}  // namespace

int run_comparison(int argc, char** argv, ComparisonKind kind) {
  MpiWorld world;
  ComparisonFlags flags;
  namespace po = boost::program_options;
  const bool zero = kind == ComparisonKind::zero_stages;
  po::options_description options(zero ? "zero_bench options" : "offload_bench options");
  add_comparison_flags(options, flags, kind);
  const std::string per_rank =
      "\nGPU memory (gpu_peak_gb and the pools) is the largest over the ranks; the results' per_rank array has each "
      "rank's host, GPU, step times, tokens/s, peak memory, host RSS, median SM clock, power and clock-limiting "
      "reasons, and a configuration whose ranks differ by more than 5% is flagged with the slow rank and why.";
  const std::string usage =
      (zero ? "usage: [mpirun -np N] zero_bench [options]\nTrains the model with each ZeRO stage in turn (one rank "
              "per GPU) and reports throughput, memory and the recommended stage."
            : "usage: [mpirun -np N] offload_bench [options]\nTrains the model with each offload strategy in turn "
              "(one rank per GPU) and reports throughput, GPU and host memory and the recommended strategy.") +
      per_rank;
  return run_program(argc, argv, usage, options,
                     [&](const po::variables_map& vm) { return compare(world, flags, vm, kind); });
}

}  // namespace zb
