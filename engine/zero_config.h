// ZeroConfig: the ZeRO stage and DeepSpeed's communication knobs, under DeepSpeed's names (sizes in elements,
// as DeepSpeed counts them). The defaults are this engine's fastest, measured, not DeepSpeed's where they differ:
// gradients are reduced during backward in every stage, in buckets of 5e7 elements (DeepSpeed: after backward
// below stage 3, in buckets of 5e8), so that only the last bucket's reduction is left after backward.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace zb {

struct ZeroConfig {
  int stage = 0;  // 0: plain data parallelism; 1: optimizer state; 2: + gradients; 3: + parameters partitioned
  // Stages 0-1: gradients of consecutive units (in backward order) are reduced together once this many
  // elements have finished. Stages 2-3 reduce each unit as its backward ends (that is what frees its
  // gradient), so this knob does not apply there.
  int64_t reduce_bucket_size = 50'000'000;
  // After the optimizer step (stages 1-2, and stage 3's persistent units): units' new parameters are
  // all-gathered in groups of this many elements.
  int64_t allgather_bucket_size = 500'000'000;
  // Reduce gradients while backward is still running (else after it). Unset means on (DeepSpeed's default is
  // off except in stage 3).
  std::optional<bool> overlap_comm;
  // Stage 3: units are gathered ahead of use, in use order, up to this many elements beyond the one in use
  // (at least one unit whenever it is positive; bounded by the gather slots).
  int64_t stage3_prefetch_bucket_size = 50'000'000;
  // Stage 3: a unit with fewer elements than this stays whole on every rank (its optimizer state is still
  // partitioned). DeepSpeed applies it per tensor; the unit is our smallest gathering granularity.
  int64_t stage3_param_persistence_threshold = 100'000;
  // Stages 1-3 without offload: each unit's optimizer update runs beside the next forward, as stage 0's does,
  // and the gather of its new weights follows its own update instead of waiting for every unit's (the forward
  // of unit u waits for update u and its gather only). Off: the sharded update runs alone after backward.
  bool pipelined_updates = false;
  // Debugging: the ranks compare the collectives each issued (kind, unit, bytes, in order) at the end of every
  // step and stop with the first that differs (comm/checked_communicator.h). Off: nothing is recorded.
  bool check_collectives = false;

  bool overlaps() const { return overlap_comm.value_or(true); }
};

// Throws UsageError naming the knob when a value is out of range (stage outside 0-3, negative sizes).
void validate(const ZeroConfig& config);
std::string describe(const ZeroConfig& config);

}  // namespace zb
