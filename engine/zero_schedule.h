// ZeroSchedule: when each ZeRO stage communicates, driven by the Transformer's UnitAccess calls.
//
// - Stages 0-1: whole gradients accumulate over the micro-batches; during the last micro-batch's backward,
//   finished units are reduced in buckets of reduce_bucket_size elements (all-reduce for 0, reduce-scatter
//   for 1), as their backward ends when overlap_comm is on, else after backward.
// - Stages 2-3: a unit's whole gradient exists only during its backward (a transient slot); when the backward
//   ends it is reduce-scattered into the rank's gradient shard (added to it after the first micro-batch) and
//   the slot is reused.
// - Stage 3: a unit's weights are all-gathered into a slot before its forward and again before its backward,
//   the next units (up to stage3_prefetch_bucket_size elements) gathered ahead, and released after use.
// - After the optimizer: units held whole but updated as shards (stages 1-2, stage 3's persistent units) are
//   all-gathered in buckets of allgather_bucket_size; their next forward waits for exactly that gather. With
//   pipelined_updates the updates run aside instead (see update_on_device) and each unit's gather is issued
//   when the forward reaches it or prefetches it, after the main sequence waits for that unit's update.
// - Frozen units (LoRA's base model): gathered as their stage says, never reduced, updated or re-gathered.
// - Offload (a HostOptimizer attached): the traffic with the host is an OffloadPipeline's (gradients down as
//   backward finishes them, each unit's new weights up when the next forward first needs the unit, so that
//   forward runs behind the CPU optimizer unit by unit); the schedule tells it when, and queues the weights'
//   copy up and their gather where the stage holds them whole. With the weights on the host (cpu_full) every
//   unit is copied up into a slot before use, as stage 3 gathers it. Units whose optimizer state the store
//   keeps on the device (an offload ratio below 1) skip all of this and are published as without offload.
// All collectives and copies go onto the communicator's stream; the compute stream waits only where it reads a result,
// and every such wait is bracketed by timing events, so the sum of those stalls is the communication time that
// compute did not hide ("exposed"). With a synchronous (MPI, CPU) communicator every collective is exposed.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "engine/host_optimizer.h"
#include "engine/offload_pipeline.h"
#include "engine/offload_times.h"
#include "engine/parameter_store.h"
#include "engine/unit_slots.h"
#include "engine/zero_config.h"
#include "models/transformer.h"

namespace zb {

// What one step sent, per rank: payload bytes of each kind of collective (the buffers' sizes; the bytes on
// the wire are (N-1)/N of that for reduce-scatter and all-gather, 2(N-1)/N for all-reduce) and the time the
// compute stream waited for communication.
struct StepCommStats {
  double all_reduce_bytes = 0, reduce_scatter_bytes = 0, all_gather_bytes = 0;
  double exposed_ms = 0;
  double total_bytes() const { return all_reduce_bytes + reduce_scatter_bytes + all_gather_bytes; }
};

// Two points of a backend's work (before and after a span of it), for timing the span.
using EventSpan = std::pair<std::unique_ptr<TimingEvent>, std::unique_ptr<TimingEvent>>;

// Brings unit's weights whole into `whole` (on the device, the unit's padded length) from where this rank
// holds them: copied up from the host (cpu_full) and all-gathered from the ranks' shards, as the store says.
// Not for units resident on the device. Returns the ticket of the last copy or collective it queued.
CommTicket gather_unit_weights(Communicator& comm, const ParameterStore& store, size_t unit, Tensor& whole);

class ZeroSchedule final : public UnitAccess {
 public:
  ZeroSchedule(ParameterStore& store, Transformer& model, Backend& backend, Communicator& comm,
               TrackingAllocator& allocator, const ZeroConfig& config);
  ZeroSchedule(const ZeroSchedule&) = delete;
  ZeroSchedule& operator=(const ZeroSchedule&) = delete;

  void begin_micro_batch(int64_t micro, int64_t count);
  void end_micro_batch();
  // After the last micro-batch: every gradient reduction issued, and the compute stream waiting for them.
  void finish_gradients();
  // The sum of the squared gradient entries over the whole model (all ranks' shards where partitioned).
  double gradient_sum_of_squares();
  // The same into total (f64 [1] on the device), queued: compute work issued after it sees the sum.
  void gradient_sum_of_squares_into(Tensor& total);
  // Offload: the host optimizer that updates the weights (attach before the first step).
  void attach(HostOptimizer& host);
  // Offload, after finish_gradients: waits for the gradients' copies to the host, then starts the host
  // optimizer's update of every unit whose state it holds, in forward order; each unit's weights go back as
  // it is first needed. (Units whose state is on the device are the caller's to update.)
  void start_host_update(const OptimizerParams& params);
  // Brings every unit's update still under way (on the host, or queued aside) to the device, before reading
  // all the weights.
  void complete_updates();
  // Why a micro-batch's forward and backward are more than device work queued on the compute stream (a
  // collective, a copy to or from the host, a gather into a slot), or "" where they are only that: the same
  // work on the same buffers at every step, which a backend may record and replay (engine/pass_replay.h).
  std::string why_pass_not_device_only() const;
  // update_on_device runs the updates in order on the main sequence, never aside: a replayed pass cannot wait
  // for an update queued after it was recorded.
  void keep_updates_in_order() { updates_in_order_ = true; }
  // The compute stream waits for every update queued aside, and (pipelined updates) the gathers that follow
  // them are issued: the weights held whole are then the updated ones once wait_all() has been called.
  void wait_updates_aside() {
    for (size_t unit = 0; unit < updated_aside_.size(); ++unit) wait_update_aside(unit);
    issue_every_pending_gather();
  }
  // Calls update(unit) for every unit in forward order, to queue the device's update of each. Where it may
  // (no host optimizer, stage 0: nothing is gathered after the optimizer) and the backend takes it, the updates
  // go aside (Backend::begin_aside), after the work queued so far: the next forward (or backward) waits for each
  // unit's update just before it reads the unit, so the updates run beside it. Returns the span of the updates
  // queued aside, for timing (empty where they stay in order).
  EventSpan update_on_device(const std::function<void(size_t unit)>& update);
  // After the optimizer: the new weights go to where they are held whole; gathered copies are forgotten.
  void publish_parameters();
  // The compute stream waits for every collective issued so far.
  void wait_all() { wait_exposed(last_ticket_); }
  // This step's communication (call after the backend has synchronised); resets the counters.
  StepCommStats take_stats();
  // The copies to and from the host since the last call, and the time spent waiting for host updates.
  OffloadTimes take_offload_times();

  void forward_needs(size_t unit) override { acquire_params(unit, forward_order_); }
  void forward_done(size_t unit) override { release_params(unit); }
  GradWrite backward_needs(size_t unit, bool reads_weights) override;
  void backward_done(size_t unit) override;

 private:
  // Every unit's gradient as the optimizer reads it (this rank's shard where partitioned).
  std::vector<Tensor> optimizer_gradients() const;
  void acquire_params(size_t unit, const std::vector<size_t>& order);
  void release_params(size_t unit);
  // Whether the device's update may run aside (see update_on_device): with sharded optimizer state only when
  // pipelined, since each unit's gather must then follow its own update.
  bool can_update_aside() const {
    return offload_ == nullptr && !updates_in_order_ && (!store_.sharded_optimizer() || config_.pipelined_updates);
  }
  // Pipelined updates: issues the gather of a unit whose update was queued aside, after the main sequence
  // waits for that update; gather_pending_ is cleared. Every rank issues them in the same (forward) order.
  void issue_pending_gather(size_t unit);
  // Pipelined updates: issues the pending gathers of the units after `unit` in `order`, up to
  // allgather_bucket_size elements (at least one unit), so that they land while the forward computes.
  void prefetch_pending_gathers(size_t unit, const std::vector<size_t>& order);
  // Issues every pending gather (before anything else reads or writes the units' weights).
  void issue_every_pending_gather();
  // The compute stream waits for the unit's update queued aside, if one still is.
  void wait_update_aside(size_t unit);
  UnitSlots::Slot* gather(size_t unit);  // issues the all-gather (or copy up) into a slot taken for the unit
  // Offload: unit's gradient range is final (after the collectives and compute issued so far).
  void gradient_final(size_t unit) {
    if (offload_) offload_->gradient_final(unit);
  }
  // Offload: the unit's new weights are on their way up (or were never the host's to update).
  void ensure_updated(size_t unit) {
    if (offload_) offload_->ensure_updated(unit);
  }
  // Offload: queues a unit's new weights up from the host, and their gather where the unit is held whole.
  void send_up(size_t unit, const Tensor& updated_weights);
  void prefetch_after(size_t unit, const std::vector<size_t>& order);
  // Calls issue_bucket(bucket) for consecutive runs of `units`, each closed once it holds at least
  // bucket_numel elements (the last one may hold fewer): the bucketing rule of both reduce and gather.
  template <typename IssueBucket>
  void for_each_bucket(const std::vector<size_t>& units, int64_t bucket_numel, IssueBucket&& issue_bucket) const;
  // One NCCL group over the units' whole gradients: all-reduce (stage 0) or in-place reduce-scatter (stage 1).
  void reduce_units(const std::vector<size_t>& units);
  // One group of in-place all-gathers of the units' updated shards into their whole weights.
  void gather_units(const std::vector<size_t>& units);
  void wait_exposed(CommTicket ticket);
  // Runs a collective, keeping the last ticket and timing it on the host when the communicator is synchronous.
  template <typename Collective>
  CommTicket issue(Collective&& collective);

  ParameterStore& store_;
  Transformer& model_;
  Backend& backend_;
  Communicator& comm_;
  TrackingAllocator& allocator_;
  ZeroConfig config_;
  bool synchronous_comm_;
  std::vector<size_t> forward_order_, backward_order_;
  UnitSlots param_slots_, grad_slots_;
  std::vector<UnitSlots::Slot*> held_params_, held_grads_;
  std::vector<CommTicket> params_ready_;  // the post-optimizer gather each whole unit waits for
  std::vector<bool> gather_pending_;      // pipelined updates: whole units whose gather is not issued yet
  std::vector<Buffer> staging_;           // stages 2-3 with micro-batches: a reduce-scatter's landing place
  // Each unit's update queued aside, until the compute stream waits for it.
  std::vector<std::unique_ptr<TimingEvent>> updated_aside_;
  std::vector<std::pair<size_t, CommTicket>> pending_adds_;
  std::vector<size_t> unreduced_;  // stages 0-1: units whose gradient is complete and not yet reduced
  int64_t unreduced_numel_ = 0;
  int64_t micro_ = 0, micro_count_ = 1;
  CommTicket last_ticket_ = 0, last_reduction_ = 0;
  StepCommStats stats_;
  std::vector<EventSpan> waits_;
  double host_comm_ms_ = 0;
  std::unique_ptr<OffloadPipeline> offload_;  // with a host optimizer attached
  bool updates_in_order_ = false;
};

}  // namespace zb
