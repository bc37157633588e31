// Where the optimizer state (and, in later strategies, the weights) live: on the GPU (none), or in host
// memory with the CPU optimizer updating the rank's shard (cpu_optimizer, ZeRO-Offload). cpu_full and nvme
// are named here so that the command line can say they are not available yet rather than not knowing them.
#pragma once

#include <string_view>

namespace zb {

enum class OffloadStrategy { none, cpu_optimizer, cpu_full, nvme };

// Throws UsageError naming the accepted values (and which of them are not implemented yet).
OffloadStrategy parse_offload_strategy(std::string_view name);
std::string_view offload_strategy_name(OffloadStrategy strategy);

}  // namespace zb
