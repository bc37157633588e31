// HostOptimizer: the cpu_optimizer offload strategy's optimizer (ZeRO-Offload). The fp32 master weights and
// Adam moments of the rank's optimizer range (its shard, or everything in stage 0) live in host memory
// (pinned when the backend is a GPU, so copies run at full PCIe speed); each step, per unit, the gradient
// range comes to the host, the CPU optimizer updates it, and the new model-dtype weights go back to the
// device, into the range the ZeroSchedule then publishes as for on-device optimizers.
#pragma once

#include <vector>

#include "core/tracking_allocator.h"
#include "engine/parameter_store.h"
#include "kernels/backend.h"
#include "kernels/optimizer_params.h"

namespace zb {

class HostOptimizer {
 public:
  // The master weights start from the layout's initial values under `seed`, as the device's would.
  HostOptimizer(ParameterStore& store, Backend& backend, TrackingAllocator& host_allocator, uint64_t seed,
                bool needs_second_moment);
  HostOptimizer(const HostOptimizer&) = delete;
  HostOptimizer& operator=(const HostOptimizer&) = delete;

  void step(const OptimizerParams& params);
  // Bytes of host memory a store's optimizer ranges need with this strategy (master, m, v and the two
  // staging copies), for the capacity check before anything is allocated.
  static size_t host_bytes(const ParameterStore& store, bool needs_second_moment);

 private:
  struct Unit {
    int64_t n = 0;
    Buffer master, m, v, grad, weights;  // grad and weights: model dtype, the transfer stages
  };

  ParameterStore& store_;
  Backend& backend_;
  std::vector<Unit> units_;
};

}  // namespace zb
