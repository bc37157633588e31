// HostOptimizer: the optimizer of the offload strategies. The fp32 master weights and Adam moments of the
// rank's optimizer range (its shard, or everything in stage 0) live in host memory (cpu_optimizer,
// ZeRO-Offload; pinned when the backend is a GPU, so copies run at full PCIe speed) or in a file per rank on
// NVMe (nvme, ZeRO-Infinity), read one unit ahead into a pinned staging buffer and written back behind.
// Each step, per unit, the gradient range comes to the host, the CPU optimizer updates it, and the new
// model-dtype weights go back to the device, into the range the ZeroSchedule then publishes as for
// on-device optimizers.
#pragma once

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "core/tracking_allocator.h"
#include "engine/parameter_store.h"
#include "kernels/backend.h"
#include "kernels/optimizer_params.h"
#include "offload/aio_file.h"

namespace zb {

// Where the state lives: in host memory, or in a file of `path` (a new file, removed at the end) through aio.
struct HostStateStorage {
  bool nvme = false;
  std::string path;
  AioConfig aio;
};

// Time the last step spent, on the host, in each phase.
struct HostOptimizerTimes {
  double copies_ms = 0;       // gradients to the host and weights back
  double cpu_ms = 0;          // the CPU optimizer
  double read_wait_ms = 0;    // waiting for NVMe reads that were not finished when needed
  double write_wait_ms = 0;   // waiting for NVMe writes before their staging buffer is reused
  double nvme_read_bytes = 0, nvme_write_bytes = 0;

  HostOptimizerTimes& operator+=(const HostOptimizerTimes& o) {
    copies_ms += o.copies_ms, cpu_ms += o.cpu_ms, read_wait_ms += o.read_wait_ms, write_wait_ms += o.write_wait_ms;
    nvme_read_bytes += o.nvme_read_bytes, nvme_write_bytes += o.nvme_write_bytes;
    return *this;
  }
};

class HostOptimizer {
 public:
  // The master weights start from the layout's initial values under `seed`, as the device's would.
  HostOptimizer(ParameterStore& store, Backend& backend, TrackingAllocator& host_allocator, uint64_t seed,
                bool needs_second_moment, HostStateStorage storage = {});
  ~HostOptimizer();
  HostOptimizer(const HostOptimizer&) = delete;
  HostOptimizer& operator=(const HostOptimizer&) = delete;

  void step(const OptimizerParams& params);
  // Bytes of host memory the strategy needs for a store's optimizer ranges (the state itself in memory, or
  // only the staging buffers with NVMe), for the capacity check before anything is allocated.
  static size_t host_bytes(const ParameterStore& store, bool needs_second_moment, bool nvme);
  const HostOptimizerTimes& last_times() const { return times_; }
  // Whether the NVMe file uses O_DIRECT (false: the file system refused it; buffered I/O was used).
  bool direct_io() const { return file_ && file_->direct(); }

 private:
  struct Unit {
    int64_t n = 0;
    Buffer master, m, v;      // in memory; empty with NVMe
    int64_t file_offset = 0;  // with NVMe: where [master | m | v] starts, each padded to 4 KiB
  };
  // One unit's update on state at master/m/v (n floats each).
  void update_unit(size_t u, float* master, float* m, float* v, const OptimizerParams& params);
  void step_nvme(const OptimizerParams& params);
  size_t state_bytes(const Unit& unit) const;  // of one unit's [master | m | v] in the file

  ParameterStore& store_;
  Backend& backend_;
  bool second_moment_;
  std::vector<Unit> units_;
  Buffer grad_stage_, weights_stage_;  // model dtype, the largest unit's range: the copies' host side
  std::unique_ptr<AioFile> file_;
  Buffer nvme_stage_[2];               // 4 KiB-aligned: one unit being updated, the other read or written
  std::future<void> pending_write_[2];
  HostOptimizerTimes times_;
};

}  // namespace zb
