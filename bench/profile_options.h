// What --profile-dir and --profile-schedule ask for (bench/profiler.h takes the profile).
#pragma once

#include <optional>
#include <string>

#include "core/profile_schedule.h"

namespace zb {

struct ProfileOptions {
  std::string dir;                          // empty: no files (and no profile, unless in_memory)
  std::optional<ProfileSchedule> schedule;  // none: the last three steps of each configuration (one warm-up before)
  // Profile without a folder: the windows' summaries and unit breakdowns are kept (the sweep's per-model profile),
  // nothing is written or printed.
  bool in_memory = false;
  bool enabled() const { return !dir.empty() || in_memory; }
  bool writes_files() const { return !dir.empty(); }
  ProfileSchedule schedule_for(int64_t last_step) const {
    return schedule ? *schedule : ProfileSchedule::last_steps(last_step, 3);
  }
};

}  // namespace zb
