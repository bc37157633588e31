// What one configuration measured, and how a BenchRecord is filled from it: the fields that say what ran
// (configuration_record), the memory (any outcome) and the measurements of a run that finished. zero_bench and
// offload_bench fill their records so (BenchRunner), and `train --json` fills the same record for its run.
// fill_memory and fill_measurements are collective: every rank calls them, as they agree on the worst rank's
// memory and gather every rank's own figures.
#pragma once

#include <optional>
#include <vector>

#include "bench/bench_record.h"
#include "bench/rank_results.h"
#include "comm/rank_agreement.h"
#include "core/memory_pool.h"
#include "core/tracking_allocator.h"
#include "engine/trainer.h"

namespace zb {

// The timed steps of every repeat, summed per field for the means.
struct TimedSteps {
  std::vector<double> repeat_mean_ms;
  StepStats sum;  // of the fields added up in add
  OffloadTimes offload;
  double comm_bytes = 0;
  int64_t count = 0;
  std::optional<double> loss_first, loss_last;  // of every step, warm-up included
  float loss_scale = 1;                         // the last step's gradients' loss scale
  int64_t skipped_steps = 0;                    // steps skipped for an overflow, warm-up and every repeat included
  RankSteps rank;                               // every timed step's time, and this rank's busy time and tokens

  // Every step (warm-up included): its loss and loss scale, and whether it was skipped.
  void note_step(const StepStats& s) {
    if (!loss_first) loss_first = s.loss;
    loss_last = s.loss;
    loss_scale = s.loss_scale;
    skipped_steps += s.skipped ? 1 : 0;
  }
  // A timed step.
  void add(const StepStats& s, int world);
  // Ends a repeat: the mean time of its timed steps (those added since the last call), where it had any.
  void end_repeat();

 private:
  size_t repeat_begin_ = 0;  // the first of rank.step_ms that belongs to the current repeat
};

// This rank's memory over a configuration's repeats: the peaks by pool and in all (device), what was still
// allocated at the end, the host memory the offload pinned and the process's resident set (bytes).
struct MeasuredMemory {
  PoolUsage pools[kMemoryPoolCount];
  size_t total_peak = 0;
  size_t backend_workspace = 0;  // the backend's own, in the workspace pool (Backend::workspace_bytes), at the end
  std::optional<size_t> outside_engine;  // a GPU's memory in use outside the allocator (TrackingAllocator::held_outside)
  double allocated_at_end = 0, host_pinned = 0, resident = 0;
  // Keeps the larger of each peak and the allocator's, and of the backend's workspace (after a repeat).
  void add_peaks(const TrackingAllocator& device_allocator, const Backend& backend);
  // Once the timed steps are done: what the device still holds, the host memory pinned, the resident set.
  void note_end_of_steps(const TrackingAllocator& device_allocator, const TrackingAllocator& host_allocator);
};

// The settings a record's derived figures need.
struct RecordSettings {
  int64_t repeat = 1;
  std::optional<double> peak_tflops;   // the device's dense peak (MFU)
  std::optional<double> gpu_hour_usd;  // (cost per 1000 samples)
};

// A record of what runs: stage, strategy, model, sizes, dtype (status "ok", nothing measured yet).
BenchRecord configuration_record(const TrainingOptions& options, int world, int64_t repeat);
// The memory fields, measured (the worst rank's) and predicted (engine/memory_plan.h, each rank its own, the worst
// kept), for any outcome: how far a failed run got.
void fill_memory(BenchRecord& r, const TrainingOptions& options, const MeasuredMemory& memory,
                 const RankAgreement& agreement);
// The measured fields of a run whose timed steps finished on every rank: step statistics (this rank's),
// throughput, phases, offload and NVMe figures, losses, cost, and every rank's own figures with their spread.
void fill_measurements(BenchRecord& r, const TrainingOptions& options, const TimedSteps& timed,
                       const MeasuredMemory& memory, const RankResult& mine, const RecordSettings& settings,
                       const RankAgreement& agreement);

}  // namespace zb
