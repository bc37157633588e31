// The engine's own memory model: what one rank of a training run allocates, predicted by running the engine's
// code (the parameter store, the model's activations, the ZeRO schedule's slots and staging, the step's buffers)
// over memory that is only counted (CountingMemory), with a backend and a communicator that do no work
// (DryRunBackend, DryRunCommunicator). Nothing is computed or transferred, so a 70B model on 512 ranks plans in
// moments on any machine; and since the allocations are the engine's, padding, persistent units, slot rotation and
// prefetch, accumulation staging and the fp32 staging of initialization are counted as training has them.
//
// Two steps run, since the schedule's slots grow to their working set during the first and stay. The device's
// peak is the larger of two moments: initialization (the store and activations, and one unit's fp32 staging) and
// training (the store, activations, slots, staging and step buffers). What the plan cannot see is the backend's
// own workspace (GEMM workspaces, kernels' scratch), which the caller gives (0 for the CPU backend, which keeps
// none in the engine's allocator); it is counted as held through both moments. (cuBLASLt's timing of GEMM
// algorithms, on a GPU's first steps, may also take a scratch C of up to 64 MiB for a moment.)
#pragma once

#include <array>
#include <cstddef>

#include "core/memory_pool.h"
#include "engine/trainer.h"

namespace zb {

struct MemoryPlan {
  std::array<size_t, kMemoryPoolCount> pool_peak{};  // each pool's own peak, in bytes
  size_t peak = 0;                                    // the device's peak over all pools at once
  size_t initializing = 0, training = 0;              // the device's peak in each of the two moments
  // The host memory an offload strategy needs on this rank (HostOptimizer::host_bytes; speculation's spare state,
  // which takes only what the host can spare, aside).
  size_t host_bytes = 0;
  size_t pool(MemoryPool p) const { return pool_peak[size_t(p)]; }
};

// The plan of rank `rank` of `world` training with `options` (its nvme_path unused: nothing is written).
// backend_workspace_bytes: device memory the backend holds in the engine's allocator, counted in the workspace
// pool. Throws as the Trainer would for options it refuses (an invalid ZeRO setting or offload ratio).
MemoryPlan plan_memory(const TrainingOptions& options, int rank, int world, size_t backend_workspace_bytes = 0);

}  // namespace zb
