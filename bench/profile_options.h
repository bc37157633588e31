// What --profile-dir and --profile-schedule ask for (bench/profiler.h takes the profile).
#pragma once

#include <optional>
#include <string>

#include "core/profile_schedule.h"

namespace zb {

struct ProfileOptions {
  std::string dir;                          // empty: no profile
  std::optional<ProfileSchedule> schedule;  // none: the last three steps of each configuration (one warm-up before)
  bool enabled() const { return !dir.empty(); }
  ProfileSchedule schedule_for(int64_t last_step) const {
    return schedule ? *schedule : ProfileSchedule::last_steps(last_step, 3);
  }
};

}  // namespace zb
