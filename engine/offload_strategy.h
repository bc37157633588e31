// Where the optimizer state and the weights live: everything on the GPU (none); the optimizer state in host
// memory with the CPU optimizer updating the rank's shard (cpu_optimizer, ZeRO-Offload); that and the
// model-dtype weights in host memory, each unit copied to the GPU for its use (cpu_full); or the optimizer
// state in files on NVMe that the CPU optimizer streams through (nvme, ZeRO-Infinity).
#pragma once

#include <string_view>

namespace zb {

enum class OffloadStrategy { none, cpu_optimizer, cpu_full, nvme };

// Throws UsageError naming the accepted values.
OffloadStrategy parse_offload_strategy(std::string_view name);
std::string_view offload_strategy_name(OffloadStrategy strategy);

}  // namespace zb
