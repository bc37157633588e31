// Where the optimizer state (and, in later strategies, the weights) live: on the GPU (none), in host memory
// with the CPU optimizer updating the rank's shard (cpu_optimizer, ZeRO-Offload), or in files on NVMe that
// the CPU optimizer streams through (nvme, ZeRO-Infinity). cpu_full is named so that the command line can
// say it is not available yet rather than not knowing it.
#pragma once

#include <string_view>

namespace zb {

enum class OffloadStrategy { none, cpu_optimizer, cpu_full, nvme };

// Throws UsageError naming the accepted values (and which of them are not implemented yet).
OffloadStrategy parse_offload_strategy(std::string_view name);
std::string_view offload_strategy_name(OffloadStrategy strategy);

}  // namespace zb
