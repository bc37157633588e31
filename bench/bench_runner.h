// BenchRunner: runs the configurations of one comparison, one after another, in one MPI job. Each run
// trains with the engine (warm-up steps, then timed steps, --repeat times) and comes back as a BenchRecord.
// A configuration that fails on any rank (out of memory, an I/O error, a NaN loss) is recorded as `oom` or
// `error` on every rank, with the failing rank's message, after its memory is released (the trainer and
// everything it allocated are gone before the next one starts); the runner then goes on.
//
// Ranks agree twice per configuration (after the trainer is built, where the largest allocations happen,
// and at the end) and once per step on an interrupt. A failure that strikes one rank alone in the middle of
// a step leaves the others waiting in a collective that rank will not join: it then waits for them at the
// agreement until agreement_timeout_s, and ends the job (MPI_Abort) with its message rather than let the
// job hang. The caller has written what finished before (write after each configuration).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "bench/bench_measurements.h"
#include "bench/bench_record.h"
#include "bench/gpu_telemetry.h"
#include "bench/profiler.h"
#include "comm/communicator.h"
#include "comm/mpi_world.h"
#include "comm/rank_agreement.h"
#include "core/device.h"
#include "core/tracking_allocator.h"
#include "engine/token_source.h"
#include "engine/trainer.h"
#include "kernels/backend.h"
#include "kernels/backend_options.h"

namespace zb {

struct BenchSettings {
  Device device;
  BackendOptions backend_options;  // the GPU backend's choices (the programs read them from the environment)
  int64_t num_steps = 20;          // timed steps
  int64_t warmup_steps = 5;        // before them, not timed
  int64_t repeat = 1;
  std::optional<double> gpu_hour_usd;
  std::optional<size_t> device_memory_limit;  // bytes: the card to run as (bench/device_memory_cap.h)
  std::string data_glob;                      // empty: synthetic tokens
  TokenFileFormat data_format = TokenFileFormat::llmc;
  // The device's dense peak for MFU (none: no MFU): the 16-bit tensor cores' from the GPU's name, applied to bf16
  // and fp16 configurations only, or one given (--peak-tflops), applied to every configuration.
  std::optional<double> peak_tflops;
  bool peak_for_every_dtype = false;
  // How long a rank that failed waits for the others to agree before it ends the job: they may be stuck in
  // a collective of the step it failed out of.
  double agreement_timeout_s = 600;
  // Tests: rank `rank` fails at step `step` (1-based, warm-up included) of configuration `configuration`.
  struct InjectedFailure {
    int rank = 0, configuration = 0;
    int64_t step = 0;
  };
  std::optional<InjectedFailure> inject_failure;
  // --profile-dir: each configuration's first repeat is profiled (bench/profiler.h), its files named by its label.
  ProfileOptions profile;
};

// Where a run is: configuration index (1-based) of count, and the step (1-based) of all its steps.
struct RunProgress {
  int configuration = 1, configurations = 1;
  int64_t step = 0, steps = 0;
  std::string label;
};

class BenchRunner {
 public:
  BenchRunner(MpiWorld& world, const BenchSettings& settings);
  ~BenchRunner();
  BenchRunner(const BenchRunner&) = delete;
  BenchRunner& operator=(const BenchRunner&) = delete;

  // Runs one configuration; never throws for the configuration's own failures (they are its status).
  // `interrupted` is polled once per step (any rank's yes stops every rank); on_step reports progress.
  BenchRecord run(const TrainingOptions& options, RunProgress progress, const std::function<bool()>& interrupted,
                  const std::function<void(const RunProgress&)>& on_step);

  const RankAgreement& agreement() const { return agreement_; }
  // The last configuration's first profiled window split by units (this rank's), where it was profiled.
  const std::optional<StepBreakdown>& last_breakdown() const { return breakdown_; }
  // What a profile needs of this rank's machine to measure its peak rates (bench/peak_rates.h).
  Backend& backend() { return *backend_; }
  TrackingAllocator& device_allocator() { return allocator_; }
  Communicator& communicator() { return *comm_; }
  int world_size() const { return world_.size(); }
  std::string communicator_description() const { return comm_->describe(); }

 private:
  // A configuration's status as the ranks agreed on it (0 ok; larger is worse) and the failing rank's message.
  struct Outcome {
    int status = 0;
    std::string message;
    std::string oom_pool;  // out of memory: the pool that asked and its bytes, where known
    size_t oom_bytes = 0;
  };
  // The configuration's repeats, each with a trainer of its own, until one fails: the timed steps and memory of
  // those that ran, and the outcome.
  void run_repeats(const TrainingOptions& options, RunProgress& progress, const std::function<bool()>& interrupted,
                   const std::function<void(const RunProgress&)>& on_step, Outcome& outcome, TimedSteps& timed,
                   MeasuredMemory& memory);
  // Runs body (a failure becomes the outcome: oom or error), then the ranks agree on the worst outcome; a rank
  // the others do not join within agreement_timeout_s ends the job.
  void agree(Outcome& outcome, const std::function<void()>& body);
  // With a device memory cap: a warning where the device holds noticeably more outside the engine than when the
  // cap was set (a library's buffers made during the steps, which the cap did not count).
  void warn_if_outside_grew() const;
  // Tests: throws the failure BenchSettings::inject_failure asks for at this step of this rank.
  void fail_if_injected(const RunProgress& progress) const;

  MpiWorld& world_;
  BenchSettings settings_;
  TrackingAllocator allocator_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
  RankAgreement agreement_;
  GpuTelemetry telemetry_;  // this rank's GPU during the timed steps
  size_t held_outside_ = 0;  // with a device memory cap: what the device held outside the engine at the last start
  // With a profile: the backend the trainers use (traced_ in front of backend_), the device's activity (null
  // without one), the device's ceilings, and the last profiled configuration's figures.
  std::unique_ptr<Backend> traced_;
  std::unique_ptr<DeviceActivity> activity_;
  std::optional<DeviceCeilings> ceilings_;  // measured before the first profiled configuration
  std::optional<ProfileRecordFields> profiled_;
  std::optional<StepBreakdown> breakdown_;
  Backend& trainer_backend() { return traced_ ? *traced_ : *backend_; }
};

}  // namespace zb
