// A recorded window's steps split by the model's units (bench/profile_window.h): the time each unit's forward and
// backward computed, the optimizer's update, the compute outside both, and the bytes of each collective kind each
// unit called for. A sweep's per-model profile (bench/model_profile.h) keeps one per configuration, for a planner
// that composes step times from units.
//
// Attribution: a unit's pass is the slice "<unit> forward" / "<unit> backward" on the thread that queues (GPU) or
// runs (CPU backend) it. Compute is the ops' own slices on the CPU backend, the kernels an op launched on a GPU; it
// belongs to the pass whose slice holds the op's start on the op's thread, to the update where the op is the
// optimizer's, else to "other" (the loss scale, the gradient norm, clipping). Kernels on several streams at once
// count each in full: these are the units' own times, not the step's wall time, which the summary's exposed times
// split. The host update (offload) is its threads' wall time. Collective bytes are those the host asked for, at the
// call, by kind (a group of collectives by theirs, "mixed" where they differ).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bench/profile_window.h"

namespace zb {

struct UnitTimes {
  std::string unit;  // "embeddings", "block.0", ..., "final"
  double forward_ms = 0, backward_ms = 0;
  std::map<std::string, double> collective_bytes;  // by kind: "all_gather", "reduce_scatter", "all_reduce", ...
};

// Per step: the mean over the window's steps.
struct StepBreakdown {
  std::vector<UnitTimes> units;  // in the order their forward first ran
  double optimizer_ms = 0;       // the device's update (the CPU backend's: its update ops)
  double cpu_optimizer_ms = 0;   // the host update's wall time (offload strategies)
  double other_ms = 0;           // compute in neither a unit's pass nor the update
  std::map<std::string, double> collective_bytes_outside_units;  // by kind
  double step_ms = 0;                                            // the steps' own mean time, as the trace shows them
  int steps = 0;
  // Units' forward and backward, the update, the host update and the other compute: on the CPU backend, whose
  // work runs one op after another, this is the step less the gaps between ops.
  double accounted_ms() const;
};

StepBreakdown step_breakdown(const ProfileWindow& window);

}  // namespace zb
