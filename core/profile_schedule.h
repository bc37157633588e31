// Which steps a profile records: PyTorch's profiler schedule (torch.profiler.schedule), so that a user's
// `skip_first=5,wait=2,warmup=1,active=3,repeat=2` records here the steps it records there. Steps count from 1
// as the programs print them (PyTorch's step k is our step k + 1). After skip_first steps, cycles of `wait` idle
// steps, `warmup` steps (the profiler runs, nothing is kept: its start-up cost falls there) and `active`
// recorded steps; `repeat` cycles (0: until the run ends). skip_first_wait (PyTorch 2.5) drops the first cycle's
// wait. The recorded steps of one cycle are one window: one trace and one summary each.
#pragma once

#include <cstdint>
#include <string>

namespace zb {

enum class ProfileAction {
  none,             // not profiled
  warmup,           // the profiler runs; nothing kept
  record,           // recorded
  record_and_save,  // recorded, and the last of its window: the window is written after it
};

struct ProfileSchedule {
  int64_t skip_first = 0, wait = 0, warmup = 0, active = 1, repeat = 0;
  bool skip_first_wait = false;

  // `key=value` pairs separated by commas, keys among skip_first, wait, warmup, active, repeat and
  // skip_first_wait, each at most once; a key left out keeps its default above. Throws UsageError naming `flag`
  // and what is accepted: a key unknown or repeated, a value not a whole number, active below 1, others below 0.
  static ProfileSchedule parse(const std::string& text, const std::string& flag = "--profile-schedule");
  // The schedule that records the last `count` of steps 1..last_step, the step before them its warm-up (CUPTI's
  // start-up falls there, not in a recorded step), where there is one.
  static ProfileSchedule last_steps(int64_t last_step, int64_t count);

  // What the profiler does at `step` (1-based).
  ProfileAction action(int64_t step) const;
  // Whether the profiler runs at `step` (warms up or records).
  bool active_at(int64_t step) const { return action(step) != ProfileAction::none; }
  // "skip_first=5,wait=2,warmup=1,active=3,repeat=2" (every field, in that order; skip_first_wait where set).
  std::string describe() const;
};

}  // namespace zb
