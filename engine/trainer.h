// Trainer: one rank's training loop. Each step runs forward and backward over grad_accum micro-batches,
// lets the ZeroSchedule reduce gradients as the stage requires, clips by the global gradient norm (over all
// ranks' shards) and updates the rank's part of the optimizer state; the schedule then sends the new weights
// where they are held whole. With world size 1 every stage is plain training.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "comm/checked_communicator.h"
#include "comm/communicator.h"
#include "core/tracking_allocator.h"
#include "engine/host_optimizer.h"
#include "engine/loss_scaler.h"
#include "engine/offload_strategy.h"
#include "engine/parameter_store.h"
#include "engine/pass_replay.h"
#include "engine/token_source.h"
#include "engine/token_uploads.h"
#include "engine/zero_config.h"
#include "engine/zero_schedule.h"
#include "kernels/backend.h"
#include "models/transformer.h"

namespace zb {

struct TrainingOptions {
  TransformerConfig model;
  int64_t batch = 4;  // samples per micro-batch per rank
  int64_t seq = 64;
  int64_t grad_accum = 1;
  OptimizerParams optimizer;
  float grad_clip = 1.0f;  // global gradient-norm bound; 0 disables clipping
  uint64_t seed = 42;
  DType dtype = DType::f32;
  // Which activations the model keeps for backward and which it recomputes (models/activation_checkpointing.h).
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::none;
  ZeroConfig zero;
  OffloadStrategy offload = OffloadStrategy::none;
  std::string nvme_path;  // the folder of the nvme strategy's files (one per rank, removed at the end)
  AioConfig aio;
  // cpu_optimizer and cpu_full: update units on the host while backward runs, as if clipping changed
  // nothing, into spare state; kept when it did not, redone when it did (see host_optimizer.h). Units get
  // spare state, last block first, while this rank's share of the host's available memory holds it.
  bool speculative_update = true;
  // cpu_optimizer and nvme: the share of the optimizer state offloaded (DeepSpeed's offload_optimizer.ratio);
  // below 1 the rest stays on the GPU and is updated there (see offload_strategy.h).
  double offload_ratio = 1.0;
  int ranks_per_host = 1;  // the ranks sharing this host's memory (MPI's local size)
  // The loss scale and what an overflow does (engine/loss_scaler.h); the programs turn it on with fp16.
  LossScaling loss_scaling;
  // Tests: at this step (1-based; 0: never) this rank's first micro-batch's loss gradient is scaled by
  // infinity, so that every rank's gradients overflow as fp16's do.
  int64_t inject_overflow_step = 0;
  int inject_overflow_rank = 0;
  bool settle_speculation = false;  // tests: see HostOptimizer::settle_speculation_before_step
};

// Where a rank of `world` holds the weights, gradients and optimizer state that `options` ask for.
ShardGeometry shard_geometry(const TrainingOptions& options, int rank, int world);

// The device buffers a step uses beside the model's and the store's: a micro-batch's input and target ids, and
// 8-byte slots for the step's loss, sum of squares, clipping factor and a zero.
struct StepBuffers {
  Buffer inputs, targets, scalars;
};
StepBuffers allocate_step_buffers(TrackingAllocator& allocator, const TrainingOptions& options);

struct StepStats {
  int64_t step = 0;          // 1-based
  double loss = 0;           // mean over the step's tokens on all ranks
  double grad_norm = 0;      // before clipping
  double seconds = 0;        // wall-clock time of the whole step
  int64_t tokens = 0;        // on all ranks
  // Device time of the phases (the rest of `seconds` is host work, copies and waiting); optimizer_ms counts
  // the gradient norm and the clipping factor with the update, unless the update ran aside.
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  StepCommStats comm;
  OffloadTimes offload;  // the offload strategies' phases (zero without offload)
  // The previous step's update where it ran aside, beside this step's forward (Backend::begin_aside): its
  // device time, which overlaps forward_ms.
  double update_aside_ms = 0;
  // Loss scaling: the scale the step's gradients carried, and whether they overflowed, so that the step was
  // skipped (the weights and optimizer state are as they were; grad_norm is then not finite).
  float loss_scale = 1;
  bool skipped = false;
};

class Trainer {
 public:
  // comm: the ranks to train with (nullptr: this process alone). data must deal out this rank's samples.
  Trainer(const TrainingOptions& options, Backend& backend, TrackingAllocator& allocator, TokenSource& data,
          Communicator* comm = nullptr);
  Trainer(const Trainer&) = delete;  // its store and model refer to its layout
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step. Without a host optimizer the whole step is queued on the device (the loss, the norm
  // and the clipping factor computed there) and the host waits once, at its end; a non-finite loss or norm
  // then throws, the update having skipped itself.
  StepStats step();
  // Every unit's weights in fp32 on the host, unpadded, whole (gathered from the shards where partitioned).
  // Collective: every rank must call it.
  std::vector<std::vector<float>> gather_parameters();

  const ParameterLayout& layout() const { return layout_; }
  // The weights and optimizer state, with the last step's update finished (it may run on beside the next
  // step otherwise: see ZeroSchedule::update_on_device).
  ParameterStore& store();
  // Host memory of the offload strategies (pinned beside a GPU), by pool.
  const TrackingAllocator& host_allocator() const { return host_allocator_; }
  // The nvme strategy: false when its file system refused O_DIRECT and the file uses buffered I/O (the page
  // cache then serves part of the traffic: a result to record beside the numbers).
  bool nvme_direct_io() const { return host_optimizer_ && host_optimizer_->direct_io(); }
  // How many units update speculatively during backward (0 without offload, with nvme, or when the host
  // lacked the memory).
  int64_t speculative_units() const { return speculative_units_; }
  // Loss scaling: the scale of the next step, and how many steps overflowed and were skipped.
  float loss_scale() const { return scaler_ ? scaler_->scale() : 1.0f; }
  int64_t skipped_steps() const { return scaler_ ? scaler_->skipped_steps() : 0; }
  // The CPU threads of each host update (0 without offload).
  int cpu_optimizer_threads() const { return host_optimizer_ ? host_optimizer_->threads() : 0; }
  HostOptimizer::SpeculationCounts speculation_counts() {
    return host_optimizer_ ? host_optimizer_->speculation_counts() : HostOptimizer::SpeculationCounts{};
  }
  Transformer& model() { return model_; }
  // Whether the micro-batch passes are replayed from recordings, and why not where they are not.
  const PassReplay& pass_replay() const { return pass_replay_; }
  Communicator& communicator() { return *comm_; }

 private:
  // With loss scaling, whether the step's gradients overflowed: their sum of squares (the same on every rank)
  // is not finite, and the step is skipped.
  bool overflowed(double sum_of_squares) const;
  // The step's mean loss over all ranks, from host_.loss (this rank's).
  double mean_loss();
  // Throws "the loss / gradient norm is <value> at step <n>" when the loss or the norm is not finite.
  void check_finite(double loss, double norm) const;
  // Queues unit u's optimizer update on the backend (its state on the device).
  void update_on_device(size_t u, const OptimizerParams& params);

  TrainingOptions options_;
  Backend& backend_;
  TrackingAllocator& allocator_;
  TokenSource& data_;
  std::unique_ptr<Communicator> own_comm_;  // when none was given
  std::unique_ptr<CheckedCommunicator> checked_comm_;  // with zero.check_collectives on several ranks
  Communicator* comm_;
  ParameterLayout layout_;
  TrackingAllocator host_allocator_;
  ParameterStore store_;
  Transformer model_;
  ZeroSchedule schedule_;
  std::unique_ptr<HostOptimizer> host_optimizer_;  // the offload strategies'
  int64_t speculative_units_ = 0;
  // Page-locked host memory (beside a GPU) for what a step copies in the device's queue: token batches in, the
  // step's loss and gradient norm out.
  TrackingAllocator staging_;
  TokenUploads uploads_;
  PassReplay pass_replay_;
  StepBuffers buffers_;
  // The step's scalars where its work runs: the mean loss and the gradients' sum of squares (f64), the
  // clipping factor (f32); and the first two on the host, copied there at the end of the step.
  struct StepScalars {
    Tensor loss, sum_of_squares, clip_factor;
    Tensor zero;  // (device) a finite stand-in for the loss where the loss must not decide a skip
  };
  Buffer host_scalars_;
  StepScalars device_, host_;
  int64_t step_ = 0;
  int64_t applied_steps_ = 0;  // steps not skipped for an overflow: Adam's step count
  std::optional<LossScaler> scaler_;
  // A number for each gradient scale the passes have used: recorded passes differ by it (PassReplay keys).
  std::map<float, int> recording_of_scale_;
  // The last step's update queued aside (events before and after it), timed at the end of the next step.
  EventSpan previous_update_span_;
};

}  // namespace zb
