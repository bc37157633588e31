// Where the optimizer state and the weights live: everything on the GPU (none); the optimizer state in host
// memory with the CPU optimizer updating the rank's shard (cpu_optimizer, ZeRO-Offload); that and the
// model-dtype weights in host memory, each unit copied to the GPU for its use (cpu_full); or the optimizer
// state in files on NVMe that the CPU optimizer streams through (nvme, ZeRO-Infinity).
#pragma once

#include <string>
#include <string_view>

namespace zb {

enum class OffloadStrategy { none, cpu_optimizer, cpu_full, nvme };

// Throws UsageError naming the accepted values.
OffloadStrategy parse_offload_strategy(std::string_view name);
std::string_view offload_strategy_name(OffloadStrategy strategy);

// The share of the optimizer state that an optimizer offload keeps off the GPU (DeepSpeed's
// offload_optimizer.ratio, 1 by default). Below 1, the model's first units (see host_optimizer_units) keep
// their fp32 master weights and moments on the GPU and are updated there while the CPU updates the rest
// (ZeRO-Offload++'s "twin flow"): the GPU, idle while the CPU optimizer runs, takes a share of the update.
// Throws UsageError (naming no flag: callers add theirs) for a ratio outside (0, 1], or below 1 for a
// strategy that keeps no optimizer state off the GPU or that keeps the weights on the host too (cpu_full).
void validate_offload_ratio(double ratio, OffloadStrategy strategy);
// How results and offload_bench's --strategies name a strategy: "cpu_optimizer", or with a ratio below 1
// "cpu_optimizer:0.8".
std::string offload_spec_name(OffloadStrategy strategy, double ratio);

// The inverse: NAME or NAME:RATIO. Throws UsageError, naming `spec`, for an unknown name or a ratio that is not a
// number validate_offload_ratio accepts.
struct StrategySpec {
  OffloadStrategy strategy = OffloadStrategy::none;
  double ratio = 1.0;
};
StrategySpec parse_strategy_spec(const std::string& spec);

}  // namespace zb
