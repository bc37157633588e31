// Where the GPU backend runs a step's optimizer update when the trainer queues it aside (Backend::begin_aside):
// `aside` on a stream of its own, beside the next step's forward, which waits for each unit's update just
// before the unit; `in_order` on the main stream, after the gradient norm. The environment variable
// ZB_OPTIMIZER_UPDATES picks; aside by default. The same bits either way: each update reads and writes what it
// did before. docs/PERFORMANCE.md has what each measured.
#pragma once

namespace zb {

enum class OptimizerUpdates { aside, in_order };

// ZB_OPTIMIZER_UPDATES's value, or aside when it is unset or empty; UsageError naming the variable otherwise.
OptimizerUpdates optimizer_updates_from_environment();

}  // namespace zb
