// The peak rates of the machine a run is on, for the profile of a model on a GPU that a planner reads: what the
// device computes and copies at best, how fast pinned host memory and the device exchange data, what an
// all-reduce over the job's ranks carries, and what an NVMe folder writes and reads. Each is measured with the
// project's own code (the backend, the communicator, the offload's AioFile), never taken from a datasheet: what
// the planner expects of the machine must be what the engine itself can reach on it.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/tracking_allocator.h"
#include "kernels/backend.h"

namespace zb {

// The bytes of host memory one parameter's update moves in the CPU optimizer's measurement below: the fp32
// master, m and v read and written (24), the bf16 gradient read and weight written (4).
inline constexpr double kMeasuredHostUpdateBytesPerParameter = 28;

// Rates in 1e12 floating-point operations a second (tflops) and 1e9 bytes a second (gbps); absent where not
// measured (see measure_peak_rates).
struct PeakRates {
  std::optional<double> gemm_tflops;          // a large GEMM in the run's dtype (from measure_device_ceilings)
  std::optional<double> memory_gbps;          // a large copy within device memory (read + write), ditto
  std::optional<double> host_to_device_gbps, device_to_host_gbps;  // pinned host <-> device copies
  std::optional<double> collective_bus_gbps;  // all-reduce bus bandwidth at this world size (NCCL's definition:
                                              // bytes/time * 2(n-1)/n)
  int world_size = 1;
  std::optional<double> nvme_read_gbps, nvme_write_gbps;  // O_DIRECT through the project's AioFile, where a
                                                          // folder is given
  // The offload's CPU optimizer (AdamW, fp32 master and moments, the run's 16-bit gradients in and weights out in
  // place), 1e9 parameters a second on each rank, every rank of the host updating at once with the threads it
  // trains with (optimizer_threads_beside_training of ranks_per_host): the host's memory is shared, so a rank's
  // rate falls as ranks are added, which a planner needs to know.
  std::optional<double> host_optimizer_gparams_per_s;  // (kMeasuredHostUpdateBytesPerParameter each)
  int ranks_per_host = 1;
  std::string how;                            // one line: sizes and repeats of each measurement
};

// Collective over the communicator's ranks: every rank must call it with the same arguments, and every rank
// returns the same rates, each the slowest rank's (a synchronous step goes at the pace of its slowest rank). The
// host link and the NVMe folder are measured with every rank transferring at once, as the ranks of a run do;
// each rank writes a file of its own in `nvme_folder` and removes it.
//
// None (nullopt) where a rate cannot be measured: GEMM/memory/host link on the CPU backend, the collective with
// one rank, NVMe without a folder (empty). None too where any rank failed to measure it (out of memory, an I/O
// error such as a folder that does not exist or cannot be written): that is not thrown, `how` names the rate
// and the reason, and the failing rank warns on stderr; a profile must not cost the run. Only a failure of the
// communicator's host agreement itself (sum_over_ranks, barrier) propagates, since the ranks could no longer
// agree on anything. Everything allocated (from `device_allocator`, pinned and ordinary host memory) and the
// files written are released or removed before it returns; the allocator's peaks are reset, as
// measure_device_ceilings does, so that they remain the training's.
PeakRates measure_peak_rates(Backend& backend, TrackingAllocator& device_allocator, Communicator& comm, DType dtype,
                             const std::string& nvme_folder /* empty: none */, int ranks_per_host = 1);

// Every field under its own name, in the struct's order; null for an absent rate.
nlohmann::ordered_json to_json(const PeakRates& rates);

}  // namespace zb
