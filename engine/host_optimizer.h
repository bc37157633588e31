// HostOptimizer: the optimizer of the offload strategies. The fp32 master weights and Adam moments of the
// rank's optimizer range (its shard, or everything in stage 0) of the units the store puts on the host (all
// of them, unless an offload ratio below 1 keeps some on the device) live in host memory (cpu_optimizer and
// cpu_full, ZeRO-Offload; pinned beside a GPU, so copies run at full PCIe speed) or in a file per rank on
// NVMe (nvme, ZeRO-Infinity), read one unit ahead into a pinned staging buffer and written back behind.
//
// Each unit has a host buffer in the model dtype. The ZeroSchedule copies the unit's gradient range into it
// as backward finishes the unit. The update then runs on a host thread of this class's own, unit by unit in
// the order the next forward uses them, so that the schedule can send each finished unit's weights back,
// and the next forward start on it, while the CPU works on later units. The new model-dtype weights are
// written over the gradient in the same buffer (the copy back's source) or, when the weights live on the
// host (cpu_full), into the store's host weights.
//
// Speculation (in-memory state only): clipping needs the global gradient norm, known only once backward has
// ended, so the update cannot start before then, and the CPU would idle through backward. Instead, units
// with spare state update as soon as their gradient lands, with the step's parameters as they are when
// clipping changes nothing (grad_scale 1), into the spare state (and spare weights buffer), leaving the state
// and the gradient as they were. When the step's real parameters are the same (the norm is within the
// bound, or clipping is off), the spare becomes the state: the result is the in-place update's, bit for bit.
// Otherwise the speculative work is dropped and the units are updated from the untouched state.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/tracking_allocator.h"
#include "engine/offload_times.h"
#include "engine/parameter_store.h"
#include "kernels/optimizer_params.h"
#include "offload/aio_file.h"
#include "offload/cpu_optimizer.h"

namespace zb {

// Where the state lives: in host memory, or in a file of `path` (a new file, removed at the end) through aio.
struct HostStateStorage {
  bool nvme = false;
  std::string path;
  AioConfig aio;
};

class HostOptimizer {
 public:
  // The master weights start from the layout's initial values under `seed`, as the device's would.
  // speculative_units: which units get spare state for speculation (empty: none; ignored with NVMe).
  // threads: the CPU threads each update uses (see optimizer_threads_beside_training).
  // The moments are as the store's format says (store.state_format()).
  HostOptimizer(ParameterStore& store, TrackingAllocator& host_allocator, uint64_t seed, int threads,
                HostStateStorage storage = {}, const std::vector<bool>& speculative_units = {});
  ~HostOptimizer();  // waits for a running update (its errors no longer matter)
  HostOptimizer(const HostOptimizer&) = delete;
  HostOptimizer& operator=(const HostOptimizer&) = delete;

  // Bytes of host memory a strategy needs on this rank for a model held as `geometry` says: the optimizer
  // state (or, with NVMe, only its staging buffers), the units' gradient buffers and, with the weights on
  // the host, those. For the capacity check before anything is allocated.
  static size_t host_bytes(const ParameterLayout& layout, DType dtype, const ShardGeometry& geometry,
                           const OptimizerStateFormat& state, bool nvme);
  // The host bytes that speculation adds for a unit whose optimizer range holds `range` elements: spare
  // state, and a spare weights buffer unless the weights live on the host.
  static size_t speculation_bytes(int64_t range, DType dtype, const ShardGeometry& geometry,
                                  const OptimizerStateFormat& state);

  // Unit u's host buffer: its gradient range lands here before step() (model dtype, optimizer range).
  Tensor gradient_buffer(size_t u) const;
  // Where unit u's new weights are on the host once its update is done: the gradient buffer, or the store's
  // host weights (cpu_full, where nothing needs copying back).
  Tensor updated_weights(size_t u) const;

  // Starts updating the units whose state it holds, in `order` (all of them), on the optimizer's thread; returns
  // at once. The gradient
  // buffers must hold this step's gradients, and every unit of the previous step must have been taken
  // (wait_unit); what is left of it (the last NVMe writes) is waited for here.
  // Speculative units updated in this step with the same parameters are taken as they are, before the rest.
  void start_step(const OptimizerParams& params, const std::vector<size_t>& order);
  // Before the backward of step params.step (every unit of the previous step taken): units with spare state
  // update with `params` as their gradients land.
  void speculate(const OptimizerParams& params);
  // For the communicator to call once unit u's gradient of the step being speculated has landed in its
  // buffer (on any thread; harmless after this optimizer is gone). Empty when the unit does not speculate.
  std::function<void()> landing_signal(size_t u);
  // Units whose speculative update was kept, and dropped, over every step so far (final once the units are
  // done: counted before any is marked done).
  struct SpeculationCounts {
    int64_t kept = 0, discarded = 0;
  };
  SpeculationCounts speculation_counts();
  // Tests: start_step first waits until every landed gradient's speculative update is done, so that which
  // units speculated does not depend on thread timing (with synchronous copies, all of them).
  void settle_speculation_before_step(bool settle) { settle_ = settle; }
  // Blocks until unit u's update of the step started last is done. Rethrows the update's failure
  // (an IoError from the NVMe file, say), here and in every later call.
  void wait_unit(size_t u);
  bool unit_done(size_t u);  // without blocking (false after a failure)
  void finish();             // waits for the whole step; rethrows as wait_unit
  // The host phases of the steps finished since the last call.
  OffloadTimes take_times();
  int threads() const { return threads_; }
  // Whether the NVMe file uses O_DIRECT (false: the file system refused it; buffered I/O was used).
  bool direct_io() const { return file_ && file_->direct(); }

 private:
  struct StateArrays {
    Buffer master, moments;  // fp32 master weights; the moments as kernels/optimizer_state.h lays them out
  };
  struct Unit {  // (empty for a unit the device updates: see ParameterStore::optimizer_on_host)
    int64_t n = 0;
    StateArrays state;        // in memory; empty with NVMe
    StateArrays spare;        // speculation's output; empty for units that do not speculate
    Buffer spare_weights;     // speculation's weights, unless they go to the store's host weights
    int64_t file_offset = 0;  // with NVMe: where [master | moments] starts, each padded to 4 KiB
    Buffer io;                // the gradient down, and the new weights up (unless those live on the host)
    bool speculates() const { return !spare.master.empty(); }
  };
  // What the optimizer's thread shares with the training thread and with the communicator's callbacks (which
  // may run after this object is gone, hence shared ownership), under `mutex`.
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    bool stop = false, job_pending = false, running = false;
    OptimizerParams job_params;
    std::vector<size_t> job_order;
    bool job_keeps_speculation = false;
    std::vector<bool> done;
    std::exception_ptr error;
    OffloadTimes finished_times;
    // The speculation under way (0: none): a number each speculate() draws anew, never the step's own number,
    // which repeats after a step skipped for an overflow; a gradient landing late must not pass for the next.
    int64_t speculation_step = 0;
    int64_t speculations_started = 0;
    OptimizerParams speculation_params;
    std::vector<size_t> landed;        // units whose gradient landed, waiting for their speculative update
    bool speculating = false;          // a speculative update is under way
    SpeculationCounts counts;
    std::vector<bool> speculated;      // units whose spare holds this step's speculative update
    std::vector<double> speculated_ms;  // the CPU time of each
  };
  void run_worker();
  void run_step(const OptimizerParams& params, const std::vector<size_t>& order, bool keep_speculation,
                OffloadTimes& times);
  void speculate_unit(size_t u, const OptimizerParams& params);
  void update_in_memory(const std::vector<size_t>& order, const OptimizerParams& params, OffloadTimes& times);
  void update_from_file(const std::vector<size_t>& order, const OptimizerParams& params, OffloadTimes& times);
  // Unit u's state at master (n floats) and moments (laid out as the store's format says) as the CPU
  // optimizer takes it, its new weights to `weights`.
  CpuOptimizerShard shard_of(size_t u, float* master, void* moments, void* weights) const;
  // One unit's update of its state at master and moments, in place; then marks the unit done.
  void update_unit(size_t u, float* master, void* moments, const OptimizerParams& params, OffloadTimes& times);
  void mark_done(size_t u);
  void wait_writes() noexcept;
  size_t state_bytes(const Unit& unit) const;  // of one unit's [master | moments] in the file
  int64_t moments_offset(const Unit& unit) const;  // where its moments start in it

  ParameterStore& store_;
  OptimizerStateFormat format_;
  int threads_;
  std::vector<Unit> units_;
  std::unique_ptr<AioFile> file_;
  Buffer nvme_stage_[2];  // 4 KiB-aligned: one unit being updated, the other read or written
  std::future<double> pending_write_[2];
  bool settle_ = false;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  std::thread worker_;  // last: started once everything it uses exists
};

}  // namespace zb
