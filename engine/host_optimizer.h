// HostOptimizer: the optimizer of the offload strategies. The fp32 master weights and Adam moments of the
// rank's optimizer range (its shard, or everything in stage 0) live in host memory (cpu_optimizer and
// cpu_full, ZeRO-Offload; pinned beside a GPU, so copies run at full PCIe speed) or in a file per rank on
// NVMe (nvme, ZeRO-Infinity), read one unit ahead into a pinned staging buffer and written back behind.
//
// Each unit has a host buffer in the model dtype. The ZeroSchedule copies the unit's gradient range into it
// as backward finishes the unit. The update then runs on a host thread of this class's own, unit by unit in
// the order the next forward uses them, so that the schedule can send each finished unit's weights back,
// and the next forward start on it, while the CPU works on later units. The new model-dtype weights are
// written over the gradient in the same buffer (the copy back's source) or, when the weights live on the
// host (cpu_full), into the store's host weights.
#pragma once

#include <condition_variable>
#include <exception>
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
  HostOptimizer(ParameterStore& store, TrackingAllocator& host_allocator, uint64_t seed, bool needs_second_moment,
                HostStateStorage storage = {});
  ~HostOptimizer();  // waits for a running update (its errors no longer matter)
  HostOptimizer(const HostOptimizer&) = delete;
  HostOptimizer& operator=(const HostOptimizer&) = delete;

  // Bytes of host memory a strategy needs on this rank for a model held as `geometry` says: the optimizer
  // state (or, with NVMe, only its staging buffers), the units' gradient buffers and, with the weights on
  // the host, those. For the capacity check before anything is allocated.
  static size_t host_bytes(const ParameterLayout& layout, DType dtype, const ShardGeometry& geometry,
                           bool needs_second_moment, bool nvme);

  // Unit u's host buffer: its gradient range lands here before step() (model dtype, optimizer range).
  Tensor gradient_buffer(size_t u) const;
  // Where unit u's new weights are on the host once its update is done: the gradient buffer, or the store's
  // host weights (cpu_full, where nothing needs copying back).
  Tensor updated_weights(size_t u) const;

  // Starts updating every unit, in `order`, on the optimizer's thread; returns at once. The gradient
  // buffers must hold this step's gradients, and every unit of the previous step must have been taken
  // (wait_unit); what is left of it (the last NVMe writes) is waited for here.
  void start_step(const OptimizerParams& params, const std::vector<size_t>& order);
  // Blocks until unit u's update of the step started last is done. Rethrows the update's failure
  // (an IoError from the NVMe file, say), here and in every later call.
  void wait_unit(size_t u);
  bool unit_done(size_t u);  // without blocking (false after a failure)
  void finish();             // waits for the whole step; rethrows as wait_unit
  // The host phases of the steps finished since the last call.
  OffloadTimes take_times();
  // Whether the NVMe file uses O_DIRECT (false: the file system refused it; buffered I/O was used).
  bool direct_io() const { return file_ && file_->direct(); }

 private:
  struct Unit {
    int64_t n = 0;
    Buffer master, m, v;      // in memory; empty with NVMe
    int64_t file_offset = 0;  // with NVMe: where [master | m | v] starts, each padded to 4 KiB
    Buffer io;                // the gradient down, and the new weights up (unless those live on the host)
  };
  void run_worker();
  void update_in_memory(const std::vector<size_t>& order, const OptimizerParams& params, OffloadTimes& times);
  void update_from_file(const std::vector<size_t>& order, const OptimizerParams& params, OffloadTimes& times);
  // One unit's update on state at master/m/v (n floats each); then marks the unit done.
  void update_unit(size_t u, float* master, float* m, float* v, const OptimizerParams& params, OffloadTimes& times);
  void mark_done(size_t u);
  void wait_writes() noexcept;
  size_t state_bytes(const Unit& unit) const;  // of one unit's [master | m | v] in the file

  ParameterStore& store_;
  bool second_moment_;
  std::vector<Unit> units_;
  std::unique_ptr<AioFile> file_;
  Buffer nvme_stage_[2];  // 4 KiB-aligned: one unit being updated, the other read or written
  std::future<double> pending_write_[2];

  // The optimizer's thread and what it shares with the training thread (under mutex_).
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_ = false, job_pending_ = false, running_ = false;
  OptimizerParams job_params_;
  std::vector<size_t> job_order_;
  std::vector<bool> done_;
  std::exception_ptr error_;
  OffloadTimes finished_times_;
  std::thread worker_;  // last: started once everything it uses exists
};

}  // namespace zb
