// sweep: the profiling matrix. Runs the cross product of the axes (bench/sweep_cli.h), one configuration after
// another in one MPI job on the comparison runner, out of memory expected: a configuration that must run out because
// a smaller one of its kind did is recorded and not run (bench/sweep_plan.h). Writes, in --output-dir:
//   sweep_<UTC time>.json / .csv   a record a configuration (zero_bench's fields; lora_rank among them)
//   sweep_<UTC time>.svg           a heatmap of tokens/s over batch x sequence length per kind (bench/sweep_report.h)
//   profiles/<model>/<gpu>/profile.json   per configuration that ran, its units' times, the optimizer's time per
//                                  parameter, collective bytes and memory; the machine's peak rates (model_profile.h)
// `sweep --gather DIR...` merges such profiles instead of running anything.
// Exit codes: 0 done (failed configurations are results); 1 a failure of the program itself; 2 bad input, before any
// work; 130 stopped by Ctrl-C (what had finished is written).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "bench/atomic_file.h"
#include "bench/bench_measurements.h"
#include "bench/comparison_output.h"
#include "bench/model_profile.h"
#include "bench/progress_line.h"
#include "bench/run_environment.h"
#include "bench/sweep_cli.h"
#include "bench/sweep_report.h"
#include "core/errors.h"
#include "core/strings.h"
#include "engine/memory_plan.h"
#include "models/activations.h"
#include "models/parameter_layout.h"
#include "models/transformer_config.h"
#include "offload/removal_on_termination.h"

namespace zb {

namespace {

volatile std::sig_atomic_t interrupt_requested = 0;

// The share of a GPU's dense 16-bit peak a training step reaches, for the estimate printed before the run (the
// running estimate uses the configurations that finished instead).
constexpr double kAssumedShareOfPeak = 0.4;

// The floating-point work of one configuration's steps (its repeats', warm-up included), for estimates: 6 x the
// parameters' work a token (8 with full checkpointing's second forward), per rank.
double configuration_flops(const TrainingOptions& o, const BenchSettings& s) {
  double per_token = training_flops_per_token(o.model, o.seq);
  if (o.activation_checkpointing == ActivationCheckpointing::full) per_token *= 4.0 / 3.0;
  const double tokens = double(o.batch * o.seq * o.grad_accum);
  return per_token * tokens * double(s.repeat * (s.warmup_steps + s.num_steps));
}

// "1 2 4": an axis's sizes as the header prints them.
std::string sizes_text(const std::vector<int64_t>& values) {
  std::vector<std::string> texts;
  for (int64_t v : values) texts.push_back(std::to_string(v));
  return join(texts, " ");
}

// A new profile.json (profile_2.json, ...) in `folder`, made where missing: no run's profile is overwritten.
std::string new_profile_file(const std::string& folder) {
  std::filesystem::create_directories(folder);
  return claim_new_file((std::filesystem::path(folder) / "profile").string(), ".json", "{}\n") + ".json";
}

int gather(const SweepFlags& flags, const MpiWorld& world) {
  if (world.rank() != 0) return 0;
  require_writable_folder(flags.runner.output_dir, "output-dir");
  const nlohmann::ordered_json merged = gather_model_profiles(flags.gather);
  const std::string path =
      new_profile_file(model_profile_folder(flags.runner.output_dir, merged.at("model"), merged.at("gpu")));
  write_file_atomically(path, merged.dump(2) + "\n");
  std::printf("merged %zu configuration(s) measured on %zu machine(s) into %s\n", merged.at("entries").size(),
              merged.at("machines").size(), path.c_str());
  return 0;
}

int sweep(MpiWorld& world, const SweepFlags& flags, const boost::program_options::variables_map& vm) {
  if (!flags.gather.empty()) return gather(flags, world);
  SweepPlan plan = plan_sweep(flags, vm, world.size());
  plan.settings.device = device_for_rank(plan.settings.device, world);
  for (TrainingOptions& options : plan.configurations) options.ranks_per_host = world.local_size();
  // The token files against the configuration that reads the most tokens a micro-batch.
  check_token_files(*std::max_element(plan.configurations.begin(), plan.configurations.end(),
                                      [](const TrainingOptions& a, const TrainingOptions& b) {
                                        return a.batch * a.seq < b.batch * b.seq;
                                      }),
                    plan.settings, world);
  const bool printer = world.rank() == 0;
  stop_gracefully_on_interrupt(&interrupt_requested);
  BenchRunner runner(world, plan.settings);
  const RunEnvironment environment = describe_environment(world, plan.settings.device, plan.settings.backend_options);
  const std::optional<double> capacity = device_capacity_gb(plan.settings.device);
  const size_t count = plan.points.size();

  // What to expect: the configurations the memory model says do not fit, and the larger ones of their kind after
  // them; the time from the work at an assumed share of the GPU's peak.
  const std::optional<double> card_gb = plan.settings.device_memory_limit
                                            ? std::optional<double>(double(*plan.settings.device_memory_limit) / 1e9)
                                            : capacity;
  size_t expected_oom = 0, expected_skips = 0;
  double planned_flops = 0, expected_flops = 0;  // of every configuration; of those expected to run
  {
    OutOfMemoryRule expected;
    for (size_t i = 0; i < count; ++i) {
      const double flops = configuration_flops(plan.configurations[i], plan.settings);
      planned_flops += flops;
      if (expected.skip_reason(plan.points[i])) {
        ++expected_skips;
        continue;
      }
      expected_flops += flops;
      if (card_gb && double(plan_memory(plan.configurations[i], world.rank(), world.size()).peak) / 1e9 > *card_gb) {
        ++expected_oom;
        expected.ran_out(plan.points[i]);
      }
    }
  }
  if (printer) {
    const SweepAxes& a = plan.axes;
    std::printf("sweep: %zu configuration(s) of %zu model(s), batch %s, seq %s, accum %s | %s on %s | %s\n", count,
                a.models.size(), sizes_text(a.batch_sizes).c_str(), sizes_text(a.seq_lengths).c_str(),
                sizes_text(a.grad_accum).c_str(), runner.communicator_description().c_str(),
                environment.gpu_name.c_str(), environment.host_name.c_str());
    for (const std::string& note : plan.left_out) std::printf("not run: %s\n", note.c_str());
    std::printf("%lld warm-up + %lld timed steps each (the last 3 profiled by unit), repeated %lld\n",
                (long long)plan.settings.warmup_steps, (long long)plan.settings.num_steps,
                (long long)plan.settings.repeat);
    if (card_gb) {
      std::printf(
          "expected: %zu to run out of memory and %zu to be skipped after them (the memory model's pools "
          "and activations against %.1f GB)\n",
          expected_oom, expected_skips, *card_gb);
    } else {
      std::printf(
          "expected: no out-of-memory foreseen (no device memory size: the CPU backend without "
          "--device-memory-limit-gb)\n");
    }
    if (plan.settings.peak_tflops) {
      // (Per rank: each rank's work at its GPU's peak. An estimate for the 16-bit dtypes; fp32 runs slower.)
      const double seconds = expected_flops / (*plan.settings.peak_tflops * 1e12 * kAssumedShareOfPeak);
      std::printf(
          "estimate: about %s of steps, set-up not counted (6 FLOPs a parameter a token at %.0f%% of %.0f "
          "TFLOP/s; refined as configurations finish)\n",
          seconds < 120 ? cat(int64_t(seconds + 0.5), " s").c_str() : cat(int64_t(seconds / 60 + 0.5), " min").c_str(),
          kAssumedShareOfPeak * 100, *plan.settings.peak_tflops);
    } else {
      std::printf("estimate: after the first configuration (no peak rate known for this device)\n");
    }
    std::fflush(stdout);
  }

  // The machine's peak rates, once, for the profiles (every rank measures its part).
  const PeakRates rates = measure_peak_rates(runner.backend(), runner.device_allocator(), runner.communicator(),
                                             plan.configurations.front().dtype, plan.nvme_path, world.local_size());
  // The results' name, claimed before any configuration; a failure there ends every rank (bad output folder).
  std::string base, base_problem;
  if (printer) {
    try {
      base = reserve_comparison_base(plan.output_dir, "sweep");
    } catch (const std::exception& e) {
      base_problem = e.what();
    }
  }
  if (const RankAgreement::Outcome o = runner.agreement().worst(base_problem.empty() ? 0 : 1, base_problem);
      o.status != 0) {
    throw IoError(o.message);
  }
  const std::string title =
      cat("sweep: ", join(plan.axes.models, ", "), " on ", world.size(), " x ", environment.gpu_name,
          card_gb && plan.settings.device_memory_limit ? cat(" run as a ", *card_gb, " GB card") : std::string(),
          ", tokens/s per configuration");
  std::vector<BenchRecord> records;
  std::map<std::string, std::pair<std::string, nlohmann::ordered_json>> profiles;  // by model: file, profile
  const std::string run_id = printer ? new_profile_run_id(environment) : std::string();
  // Rank 0 only, between configurations: a failure (a full disk) is a warning and the sweep goes on, as the other
  // ranks do (they are already in the next configuration's collectives); the next write tries again.
  auto write_results = [&] {
    try {
      write_file_atomically(base + ".json", records_json_text(records));
      write_file_atomically(base + ".csv", to_csv(records));
      write_file_atomically(base + ".svg", sweep_heatmap_svg(records, title));
      for (const auto& [model, file] : profiles) {
        if (!file.first.empty()) write_file_atomically(file.first, file.second.dump(2) + "\n");
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: the results could not be written (the sweep goes on): %s\n", e.what());
    }
  };

  ProgressLine progress_line(printer);
  OutOfMemoryRule rule;
  double done_flops = 0, skipped_flops = 0;  // of the steps that ran; of the configurations skipped
  const auto started = std::chrono::steady_clock::now();
  bool interrupted = false;
  for (size_t i = 0; i < count; ++i) {
    const SweepPoint& point = plan.points[i];
    const TrainingOptions& options = plan.configurations[i];
    const double flops = configuration_flops(options, plan.settings);
    BenchRecord record;
    if (const std::optional<std::string> reason = rule.skip_reason(point)) {
      record = configuration_record(options, world.size(), plan.settings.repeat);
      record.status = "oom";
      record.error = *reason;
      if (plan.settings.device_memory_limit) record.device_memory_limit_gb = *card_gb;
      skipped_flops += flops;
    } else {
      const std::string label =
          cat(point.model, ", ", configuration_label(point.stage, point.strategy, true, point.checkpointing),
              ", batch ", options.batch, " x seq ", options.seq);
      RunProgress progress{int(i + 1), int(count), 0, 0, label};
      const int64_t steps = plan.settings.repeat * (plan.settings.warmup_steps + plan.settings.num_steps);
      int64_t steps_run = 0;
      record = runner.run(
          options, progress, [] { return interrupt_requested != 0; },
          [&](const RunProgress& p) {
            steps_run = p.step;
            const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
            const double done = done_flops + flops * double(p.step) / double(steps);
            // Left: every configuration not yet run or skipped (those the failures so far rule out are not known to be
            // skipped until they come up).
            const double left = planned_flops - skipped_flops - done_flops - flops;
            progress_line.show(
                p, done > 0 ? elapsed / done * (std::max(left, 0.0) + flops * double(steps - p.step) / double(steps))
                            : 0.0);
          });
      if (record.status == "interrupted") {
        interrupted = true;
        break;
      }
      if (record.status == "oom") rule.ran_out(point);
      done_flops += flops * double(steps_run) / double(steps);
      skipped_flops += flops * double(steps - steps_run) / double(steps);  // (what a failure did not run)
      if (capacity) record.gpu_capacity_gb = capacity;  // (before the profile's entry, which keeps it)
      if (record.ok() && runner.last_breakdown() && printer) {
        record.environment = environment;
        const double world_share = options.zero.stage >= 1 ? double(world.size()) : 1.0;
        const double trainable = double(record.trainable_parameters) / world_share;
        const nlohmann::ordered_json entry =
            profile_entry(run_id, record, *runner.last_breakdown(), trainable * (1 - record.offloaded_share),
                          trainable * record.offloaded_share);
        auto it = profiles.find(point.model);
        if (it == profiles.end()) {
          std::string file;  // (empty where it cannot be made: warned, not written)
          try {
            file = new_profile_file(model_profile_folder(plan.output_dir, record.model, environment.gpu_name));
          } catch (const std::exception& e) {
            std::fprintf(stderr, "warning: no profile of %s will be written: %s\n", record.model.c_str(), e.what());
          }
          it = profiles
                   .emplace(point.model,
                            std::make_pair(file, new_model_profile(record.model, record.parameters,
                                                                   environment.gpu_name, environment.git_commit)))
                   .first;
        }
        add_to_profile(it->second.second, profile_machine(run_id, environment, rates), entry);
      }
    }
    record.environment = environment;
    record.names_strategy = true;
    records.push_back(std::move(record));
    if (printer) {
      const BenchRecord& r = records.back();
      progress_line.finish();
      std::printf("[%zu/%zu] %s, batch %lld x seq %lld: %s\n", i + 1, count, r.label().c_str(), (long long)r.batch_size,
                  (long long)r.seq_length,
                  r.ok() ? cat(int64_t(r.throughput_tokens_per_sec.value_or(0) + 0.5), " tokens/s, ",
                               r.gpu_peak_gb.value_or(0), " GB peak")
                               .c_str()
                         : cat(r.status, ": ", r.error).c_str());
      std::fflush(stdout);
      write_results();
    }
  }
  progress_line.finish();
  if (printer) {
    write_results();
    std::printf("\n%s\nresults: %s.json, %s.csv\nheatmaps: %s.svg\n", sweep_table(records).c_str(), base.c_str(),
                base.c_str(), base.c_str());
    for (const auto& [model, file] : profiles) {
      if (!file.first.empty()) std::printf("profile of %s: %s\n", model.c_str(), file.first.c_str());
    }
    if (interrupted) std::printf("interrupted: %zu of %zu configuration(s) finished\n", records.size(), count);
    std::fflush(stdout);
  }
  return int(runner.agreement().max(interrupted ? 130.0 : 0.0));
}

}  // namespace

}  // namespace zb

int main(int argc, char** argv) {
  zb::MpiWorld world;
  zb::SweepFlags flags;
  boost::program_options::options_description options("sweep options");
  zb::add_sweep_flags(options, flags);
  const std::string usage =
      "usage: [mpirun -np N] sweep [options]\nRuns every combination of the axes (--models, --batch-sizes, "
      "--seq-lengths, --grad-accum, --optimizers, --stages, --strategies, --activation-checkpointing, --lora-rank, "
      "--dtype; or --config profiling_config.json), one after another, out of memory expected, and writes their "
      "records, a heatmap of tokens/s per configuration kind, and a profile per model and GPU for a planner.";
  return zb::run_program(argc, argv, usage, options,
                         [&](const boost::program_options::variables_map& vm) { return zb::sweep(world, flags, vm); });
}
