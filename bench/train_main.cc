// train: the plain trainer. Trains a model on synthetic tokens or token files and prints one line a step,
// then a summary of the steady-state steps. Under `mpirun -np N` it trains data-parallel with the ZeRO stage
// asked for, rank r on its node's GPU local_rank; rank 0 prints. With --json FILE it also writes the run's
// record, the one zero_bench writes for each configuration.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "bench/atomic_file.h"
#include "bench/bench_measurements.h"
#include "bench/cli.h"
#include "bench/device_memory_cap.h"
#include "bench/gpu_peaks.h"
#include "bench/device_ceilings.h"
#include "bench/gpu_telemetry.h"
#include "bench/profiler.h"
#include "bench/rank_results.h"
#include "bench/run_environment.h"
#include "bench/train_report.h"
#include "comm/communicator_factory.h"
#include "comm/mpi_world.h"
#include "comm/rank_agreement.h"
#include "core/cuda_devices.h"
#include "core/errors.h"
#include "kernels/backend_factory.h"
#include "kernels/traced_backend.h"

namespace {

struct TrainOnlyFlags {
  double peak_tflops = 0;  // 0: from the GPU's name
  int64_t warmup_steps = 3;
  std::string json_path;  // empty: no record written
};

// --json names a new file in an existing folder: a result is never written over another.
void check_json_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  if (fs::exists(path))
    throw zb::UsageError(zb::cat("--json: ", path, " exists; name a new file (results are not overwritten)"));
  const fs::path folder = fs::path(path).parent_path();
  if (!folder.empty() && !fs::is_directory(folder)) {
    throw zb::UsageError(zb::cat("--json: the folder ", folder.string(), " does not exist"));
  }
}

int train(zb::MpiWorld& world, const zb::TrainingFlags& flags, const TrainOnlyFlags& extra) {
  zb::TrainingRun run = zb::validate_training_flags(flags);
  run.options.ranks_per_host = world.local_size();
  run.device = zb::device_for_rank(run.device, world);
  if (!(extra.peak_tflops >= 0) || !std::isfinite(extra.peak_tflops)) {
    throw zb::UsageError(zb::cat("--peak-tflops: must be a positive number (0: look it up), got ", extra.peak_tflops));
  }
  if (extra.warmup_steps < 0) throw zb::UsageError("--warmup-steps: must not be negative");
  zb::RankAgreement agreement;  // gathers the ranks' own figures at the end
  // Rank 0 writes the record, so its file system is the one to ask; every rank learns the answer (on several
  // hosts the folder may exist on some only) and stops alike.
  std::string json_problem;
  if (world.rank() == 0) {
    try {
      check_json_path(extra.json_path);
    } catch (const zb::UsageError& e) {
      json_problem = e.what();
    }
  }
  if (const auto verdict = agreement.worst(json_problem.empty() ? 0 : 1, json_problem); verdict.status != 0) {
    throw zb::UsageError(verdict.message);
  }
  // Opens and checks the token files before any training.
  auto data = zb::make_token_source(run, world.rank(), world.size());
  zb::GpuTelemetry telemetry(run.device.is_cuda() ? zb::cuda_device_pci_bus_id(run.device.index) : std::string());
  zb::TrackingAllocator allocator(zb::make_device_memory(run.device));
  auto backend = zb::make_backend(run.device, allocator, zb::program_backend_options());
  auto comm = zb::make_communicator(world, run.device, backend->native_stream());
  const bool printer = world.rank() == 0;
  const std::string device_name = run.device.is_cuda() ? zb::cuda_device_name(run.device.index) : "CPU";
  // --profile-dir: the trainer's calls go through a traced backend, and the device's activity is recorded in the
  // schedule's windows (bench/profiler.h).
  std::unique_ptr<zb::Backend> traced;
  std::unique_ptr<zb::DeviceActivity> activity;
  std::optional<zb::Profiler> profiler;
  if (run.profile.enabled()) {
    traced = std::make_unique<zb::TracedBackend>(*backend);
    activity = zb::device_activity_or_warning(run.device, *backend, *comm, printer);
    profiler.emplace(run.profile, "train", run.num_steps,
                     zb::ProfileContext{.backend = backend.get(),
                                        .activity = activity.get(),
                                        .comm = comm.get(),
                                        .rank = world.rank(),
                                        .world = world.size(),
                                        .device_name = device_name,
                                        .ops_run_on_host = !run.device.is_cuda(),
                                        .ceilings = zb::measure_device_ceilings_or_warn(*backend, allocator,
                                                                                        run.options.dtype,
                                                                                        world.rank()),
                                        .print = printer});
  }
  // --device-memory-limit-gb: what the device holds outside the engine is measured now, after the context, the
  // libraries and the ceilings' operands (released) have had their turn.
  std::optional<zb::DeviceMemoryCap> cap;
  if (run.device_memory_limit) cap = zb::cap_device_memory(allocator, *run.device_memory_limit);
  zb::Trainer trainer(run.options, traced ? *traced : *backend, allocator, *data, comm.get());
  auto print = [&](const std::string& line) {
    if (!printer) return;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };

  const auto& o = run.options;
  zb::ThroughputModel throughput{zb::training_flops_per_token(o.model, o.seq), std::nullopt, world.size(),
                                 run.device.is_cuda() ? "GPU" : "rank"};
  // MFU against the 16-bit tensor-core peak (bf16's and fp16's are the same) only when training in one of them
  // (or with an explicit peak).
  if (extra.peak_tflops > 0)
    throughput.peak_tflops = extra.peak_tflops;
  else if (run.device.is_cuda() && zb::dtype_size(o.dtype) == 2)
    throughput.peak_tflops = zb::bf16_peak_tflops(device_name);

  print(zb::cat("model ", zb::describe(o.model)));
  print(zb::cat("device ", run.device.to_string(), " (", device_name, ") | ", zb::dtype_name(o.dtype), " | batch ",
                o.batch, " x seq ", o.seq, " x grad-accum ", o.grad_accum, " per rank | ",
                o.activation_checkpointing == zb::ActivationCheckpointing::none
                    ? std::string()
                    : zb::cat(zb::activation_checkpointing_name(o.activation_checkpointing),
                              " activation checkpointing | "),
                zb::optimizer_name(o.optimizer), " lr ", o.optimizer.lr, " | data: ", data->describe()));
  print(zb::cat(comm->describe(), " | ", zb::describe(o.zero)));
  if (run.device.is_cuda()) print(zb::cat("backend options: ", zb::program_backend_options().summary()));
  if (cap) {
    print(zb::cat("device memory: the engine may take ", double(cap->engine_bytes()) / 1e9, " GB (", cap->why(),
                  ")"));
  }
  if (o.offload == zb::OffloadStrategy::nvme && !trainer.nvme_direct_io()) {
    print(zb::cat("warning: the file system of --nvme-path ", o.nvme_path,
                  " refused O_DIRECT; the nvme strategy "
                  "uses buffered I/O, so the page cache serves part of its traffic"));
  }
  std::vector<zb::StepStats> steps;
  zb::TimedSteps summarised;  // this rank's steps of the summary (after the warm-up; at least the last)
  const int64_t first_summarised = std::clamp<int64_t>(extra.warmup_steps, 0, run.num_steps - 1);
  const int64_t summarised_steps = run.num_steps - first_summarised;
  const int64_t unprofiled_summarised =
      profiler ? profiler->unprofiled_steps(first_summarised + 1, run.num_steps) : summarised_steps;
  for (int64_t i = 0; i < run.num_steps; ++i) {
    if (i == first_summarised) telemetry.start();
    if (profiler) profiler->before_step(i + 1);
    steps.push_back(trainer.step());
    if (profiler) profiler->end_step_slice();
    summarised.note_step(steps.back());
    // The record's timing leaves out the profiled steps (they run without pass replay, traced), unless no other
    // step is left to time.
    const bool profiled = profiler && profiler->profiles(i + 1) && unprofiled_summarised > 0;
    if (i >= first_summarised && !profiled) summarised.add(steps.back(), world.size());
    print(zb::format_step(steps.back(), run.num_steps, throughput));
    if (profiler) profiler->after_step(i + 1);
  }
  telemetry.stop();
  if (profiler) profiler->finish();
  print(zb::format_summary(steps, extra.warmup_steps, throughput, allocator));
  if (profiler && unprofiled_summarised > 0 && unprofiled_summarised < summarised_steps)
    print("(the profiled steps are in the summary above; the per-rank figures and the record leave them out)");
  zb::MeasuredMemory memory;
  memory.add_peaks(allocator, *backend);
  memory.note_end_of_steps(allocator, trainer.host_allocator());
  const zb::RankResult mine = zb::own_rank_result(world.rank(), world.host_name(), run.device, summarised.rank,
                                                  double(memory.total_peak), memory.resident, telemetry);
  print(zb::format_ranks(zb::gather_rank_results(agreement, mine)));
  if (!extra.json_path.empty()) {  // (every rank: the record's figures are gathered from all of them)
    zb::BenchRecord record = zb::configuration_record(o, world.size(), 1);
    record.environment = zb::describe_environment(world, run.device, zb::program_backend_options());
    record.gpu_capacity_gb = zb::device_capacity_gb(run.device);
    zb::fill_memory(record, o, memory, agreement);
    if (cap) {
      record.device_memory_limit_gb = double(cap->card_bytes) / 1e9;
      record.device_memory_outside_gb = agreement.max(double(cap->held_outside)) / 1e9;
    }
    zb::fill_measurements(record, o, summarised, memory, mine,
                          {.repeat = 1, .peak_tflops = throughput.peak_tflops, .gpu_hour_usd = std::nullopt},
                          agreement);
    if (profiler)
      if (const auto fields = zb::profile_record_fields(profiler->windows())) zb::fill_profile(record, *fields);
    if (printer) {
      zb::write_file_atomically(extra.json_path, zb::records_json_text({record}));  // as zero_bench writes its
      print(zb::cat("record: ", extra.json_path));
    }
  }
  if (const std::string choices = backend->kernel_choices(); !choices.empty()) print(choices);
  if (run.device.is_cuda()) print(zb::cat("pass replay (CUDA graphs): ", trainer.pass_replay().describe()));
  if (const size_t host = trainer.host_allocator().total().peak) {
    const zb::ParameterStore& store = trainer.store();
    print(zb::cat("host memory of the ", zb::offload_spec_name(o.offload, o.offload_ratio), " strategy (",
                  run.device.is_cuda() ? "pinned" : "pageable", "): ", host / 1e9, " GB on rank 0; ",
                  std::round(1000 * zb::ParameterStore::host_optimizer_share(store.layout(), store.geometry())) / 10,
                  "% of the optimizer state on the host; ", trainer.speculative_units(), " of ",
                  trainer.layout().units().size(), " units update speculatively during backward; ",
                  trainer.cpu_optimizer_threads(), " CPU optimizer threads"));
  }
  return 0;
}

// A failure on one rank of several (out of memory, a full disk) would leave the others waiting forever in
// their next collective: that rank reports it and ends the whole job. (Bad flags fail alike on every rank
// before any collective, and return their exit code 2 as usual.)
int train_or_end_the_job(zb::MpiWorld& world, const zb::TrainingFlags& flags, const TrainOnlyFlags& extra) {
  try {
    return train(world, flags, extra);
  } catch (const zb::UsageError&) {
    throw;
  } catch (const std::exception& e) {
    if (world.size() == 1) throw;
    std::fprintf(stderr, "error on rank %d of %d: %s\n", world.rank(), world.size(), e.what());
    std::fflush(stderr);
    zb::abort_job(1);  // the other ranks' NVMe files are removed as the signal ends them
  }
}

}  // namespace

int main(int argc, char** argv) {
  zb::MpiWorld world;
  zb::TrainingFlags flags;
  TrainOnlyFlags extra;
  namespace po = boost::program_options;
  po::options_description options("train options");
  zb::add_training_flags(options, flags);
  options.add_options()("peak-tflops", po::value(&extra.peak_tflops)->default_value(0.0, "from the GPU's name"),
                        "the GPU's dense bf16 peak in TFLOP/s, for MFU")(
      "warmup-steps", po::value(&extra.warmup_steps)->default_value(extra.warmup_steps),
      "first steps left out of the summary")(
      "json", po::value(&extra.json_path),
      "also write the run's record to this new file: the JSON that zero_bench writes for each configuration "
      "(a one-element array), the steps after --warmup-steps timed");
  return zb::run_program(argc, argv,
                         "usage: train [options]\nTrains a decoder-only transformer and prints one line a step.",
                         options, [&] { return train_or_end_the_job(world, flags, extra); });
}
