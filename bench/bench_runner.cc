#include "bench/bench_runner.h"

#include <cstdio>

#include "comm/communicator_factory.h"
#include "bench/device_ceilings.h"
#include "bench/device_memory_cap.h"
#include "core/cuda_devices.h"
#include "core/errors.h"
#include "core/strings.h"
#include "kernels/backend_factory.h"
#include "kernels/traced_backend.h"
#include "offload/removal_on_termination.h"

namespace zb {

namespace {

// Status codes as ranks agree on them: the larger the worse.
enum Status { kOk = 0, kInterrupted = 1, kOutOfMemory = 2, kError = 3 };

const char* status_name(int status) {
  switch (status) {
    case kOk: return "ok";
    case kInterrupted: return "interrupted";
    case kOutOfMemory: return "oom";
    default: return "error";
  }
}

// A rank that failed and waited in vain for the others to agree: they are stuck in a collective it will not
// join. Ending the job is the only way out that leaves no rank hanging.
[[noreturn]] void end_job_alone(int status, const std::string& message, int rank, double waited_s) {
  std::fprintf(stderr,
               "error on rank %d: %s (%s); the other ranks did not reach the agreement within %.0f s (they wait in "
               "a collective of the step this rank left), so the job ends here; the configurations that finished "
               "are in the results already\n",
               rank, message.c_str(), status_name(status), waited_s);
  std::fflush(stderr);
  remove_registered_files();  // this rank's NVMe files: their owners never get to remove them
  abort_job(1);
}

}  // namespace

BenchRunner::BenchRunner(MpiWorld& world, const BenchSettings& settings)
    : world_(world),
      settings_(settings),
      allocator_(make_device_memory(settings.device)),
      backend_(make_backend(settings.device, allocator_, settings.backend_options)),
      comm_(make_communicator(world, settings.device, backend_->native_stream())),
      telemetry_(settings.device.is_cuda() ? cuda_device_pci_bus_id(settings.device.index) : std::string()) {
  if (!settings_.profile.enabled()) return;
  traced_ = std::make_unique<TracedBackend>(*backend_);
  activity_ = device_activity_or_warning(settings_.device, *backend_, *comm_, world_.rank() == 0);
}

BenchRunner::~BenchRunner() = default;

BenchRecord BenchRunner::run(const TrainingOptions& options, RunProgress progress,
                             const std::function<bool()>& interrupted,
                             const std::function<void(const RunProgress&)>& on_step) {
  BenchRecord r = configuration_record(options, world_.size(), settings_.repeat);
  Outcome outcome;
  TimedSteps timed;
  MeasuredMemory memory;
  run_repeats(options, progress, interrupted, on_step, outcome, timed, memory);
  r.status = status_name(outcome.status);
  r.error = outcome.status == kOk ? "" : outcome.message;
  if (outcome.status == kOutOfMemory) {
    r.oom_pool = outcome.oom_pool;
    if (outcome.oom_bytes > 0) r.oom_bytes = int64_t(outcome.oom_bytes);
  }
  if (settings_.device_memory_limit) {
    r.device_memory_limit_gb = double(*settings_.device_memory_limit) / 1e9;
    r.device_memory_outside_gb = agreement_.max(double(held_outside_)) / 1e9;
  }
  fill_memory(r, options, memory, agreement_);  // also for a failed run: how far it got
  if (outcome.status != kOk || timed.count == 0) return r;
  const RankResult mine = own_rank_result(world_.rank(), world_.host_name(), settings_.device, timed.rank,
                                          double(memory.total_peak), memory.resident, telemetry_);
  fill_measurements(
      r, options, timed, memory, mine,
      {.repeat = settings_.repeat,
       .peak_tflops = settings_.peak_for_every_dtype || dtype_size(options.dtype) == 2 ? settings_.peak_tflops
                                                                                      : std::nullopt,
       .gpu_hour_usd = settings_.gpu_hour_usd},
      agreement_);
  if (profiled_) fill_profile(r, *profiled_);
  return r;
}

void BenchRunner::run_repeats(const TrainingOptions& options, RunProgress& progress,
                              const std::function<bool()>& interrupted,
                              const std::function<void(const RunProgress&)>& on_step, Outcome& outcome,
                              TimedSteps& timed, MeasuredMemory& memory) {
  const int world = world_.size();
  progress.steps = settings_.repeat * (settings_.warmup_steps + settings_.num_steps);
  progress.step = 0;
  telemetry_.clear();
  profiled_.reset();
  breakdown_.reset();
  for (int64_t repeat = 0; repeat < settings_.repeat && outcome.status == kOk; ++repeat) {
    if (repeat == 0 && settings_.profile.enabled() && !ceilings_)  // (once: a failure is not tried again)
      ceilings_ = measure_device_ceilings_or_warn(*backend_, allocator_, options.dtype, world_.rank());
    allocator_.reset_peaks();
    if (settings_.device_memory_limit) {  // measured again for each repeat: the last one's is recorded
      const DeviceMemoryCap cap = cap_device_memory(allocator_, *settings_.device_memory_limit);
      held_outside_ = cap.held_outside;
    }
    std::unique_ptr<TokenSource> data;
    std::unique_ptr<Trainer> trainer;
    std::optional<Profiler> profiler;  // the first repeat's
    agree(outcome, [&] {
      const BatchGeometry geometry{options.batch, options.seq, world_.rank(), world};
      data = settings_.data_glob.empty()
                 ? make_synthetic_tokens(geometry, options.model.vocab_size, options.seed)
                 : make_file_tokens(settings_.data_glob, settings_.data_format, geometry, options.model.vocab_size);
      trainer = std::make_unique<Trainer>(options, trainer_backend(), allocator_, *data, comm_.get());
      if (repeat == 0 && settings_.profile.enabled()) {
        profiler.emplace(settings_.profile, profile_file_label(progress.label),
                         settings_.warmup_steps + settings_.num_steps,
                         ProfileContext{.backend = backend_.get(),
                                        .activity = activity_.get(),
                                        .comm = comm_.get(),
                                        .rank = world_.rank(),
                                        .world = world,
                                        .device_name = settings_.device.is_cuda()
                                                           ? cuda_device_name(settings_.device.index)
                                                           : std::string("CPU"),
                                        .ops_run_on_host = !settings_.device.is_cuda(),
                                        .ceilings = ceilings_.value_or(DeviceCeilings{}),
                                        .print = world_.rank() == 0});
      }
    });
    // The timed steps no profile touches, over every repeat (only the first is profiled).
    const int64_t first_timed = settings_.warmup_steps + 1, last = settings_.warmup_steps + settings_.num_steps;
    const int64_t unprofiled_timed = (settings_.repeat - 1) * settings_.num_steps +
                                     (profiler ? profiler->unprofiled_steps(first_timed, last) : settings_.num_steps);
    if (outcome.status == kOk)
      agree(outcome, [&] {
        for (int64_t step = 0; step < settings_.warmup_steps + settings_.num_steps; ++step) {
          if (agreement_.max(interrupted() ? 1 : 0) > 0) {
            outcome = {kInterrupted, "interrupted", {}, 0};
            return;
          }
          fail_if_injected(progress);
          if (step == settings_.warmup_steps) telemetry_.start();
          if (profiler) profiler->before_step(step + 1);
          const StepStats stats = trainer->step();
          if (profiler) profiler->after_step(step + 1);
          timed.note_step(stats);
          // The profiled steps (traced, without pass replay) are left out of the timing, unless no other step
          // is left to time.
          const bool profiled = profiler && profiler->profiles(step + 1) && unprofiled_timed > 0;
          if (step >= settings_.warmup_steps && !profiled) timed.add(stats, world);
          ++progress.step;
          on_step(progress);
        }
        telemetry_.stop();
        memory.note_end_of_steps(allocator_, trainer->host_allocator());
        if (settings_.device_memory_limit) warn_if_outside_grew();
        if (profiler) {
          profiler->finish();
          profiled_ = profile_record_fields(profiler->windows());
          if (!profiler->windows().empty()) breakdown_ = profiler->windows().front().breakdown;
        }
      });
    profiler.reset();  // (a window a failure left open is closed, not written)
    telemetry_.stop();  // (where the steps ended early)
    timed.end_repeat();
    memory.add_peaks(allocator_, *backend_);
    // A step that failed may have left work queued on the device that still uses the trainer's buffers.
    try {
      backend_->synchronize();
    } catch (const std::exception&) {
      // (a device error: recorded above; the buffers are released all the same)
    }
    trainer.reset();  // everything the configuration allocated is released before the next one
  }
  allocator_.set_limit(std::nullopt);
}

void BenchRunner::agree(Outcome& outcome, const std::function<void()>& body) {
  try {
    body();
  } catch (const OutOfMemory& e) {
    outcome = {kOutOfMemory, e.what(), e.pool(), e.bytes()};
  } catch (const std::exception& e) {
    outcome = {kError, e.what(), {}, 0};
  }
  const std::optional<RankAgreement::Outcome> agreed =
      agreement_.worst(outcome.status, outcome.message, settings_.agreement_timeout_s);
  if (!agreed) end_job_alone(outcome.status, outcome.message, world_.rank(), settings_.agreement_timeout_s);
  // The failing rank's pool and bytes (every rank takes part: the outcome is the same on all of them).
  if (agreed->status == kOutOfMemory && world_.size() > 1) {
    const std::vector<std::string> pools = agreement_.all_gather(outcome.oom_pool);
    const double bytes = agreement_.max(agreed->rank == world_.rank() ? double(outcome.oom_bytes) : 0.0);
    outcome.oom_pool = pools[size_t(agreed->rank)];
    outcome.oom_bytes = size_t(bytes);
  }
  outcome.status = agreed->status;
  if (outcome.status != kOk) {
    outcome.message = world_.size() > 1 ? cat("rank ", agreed->rank, ": ", agreed->message) : agreed->message;
  }
}

void BenchRunner::warn_if_outside_grew() const {
  constexpr size_t kNoticeable = size_t(64) << 20;
  const size_t now = allocator_.held_outside();
  if (now <= held_outside_ + kNoticeable) return;
  std::fprintf(stderr,
               "warning: rank %d: the device held %.2f GB outside the engine at the end of the steps, %.2f GB at "
               "the start: libraries allocated during the steps, which --device-memory-limit-gb did not count\n",
               world_.rank(), double(now) / 1e9, double(held_outside_) / 1e9);
  std::fflush(stderr);
}

void BenchRunner::fail_if_injected(const RunProgress& progress) const {
  const auto& inject = settings_.inject_failure;
  if (inject && inject->rank == world_.rank() && inject->configuration == progress.configuration &&
      inject->step == progress.step + 1) {
    throw Error(cat("a failure injected for tests on rank ", inject->rank, " at step ", inject->step));
  }
}

}  // namespace zb
