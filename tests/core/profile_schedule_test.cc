// The profile schedule picks the steps PyTorch's torch.profiler.schedule picks (its step k is our step k + 1):
// each case's recorded, saved (last of a window) and warm-up steps over the first 30 steps, worked out with
// PyTorch's rule; and the flag's parsing refuses what PyTorch would refuse.
#include <gtest/gtest.h>

#include <vector>

#include "core/errors.h"
#include "core/profile_schedule.h"

namespace zb {
namespace {

struct ScheduleCase {
  const char* text;
  std::vector<int64_t> recorded, saved, warmup;
};

std::vector<int64_t> steps_where(const ProfileSchedule& s, bool (*pick)(ProfileAction)) {
  std::vector<int64_t> steps;
  for (int64_t step = 1; step <= 30; ++step)
    if (pick(s.action(step))) steps.push_back(step);
  return steps;
}

TEST(ProfileSchedule, PicksThePyTorchSchedulesSteps) {
  const std::vector<ScheduleCase> cases = {
      {"skip_first=5,wait=2,warmup=1,active=3,repeat=2", {9, 10, 11, 15, 16, 17}, {11, 17}, {8, 14}},
      {"wait=1,warmup=1,active=2,repeat=1", {3, 4}, {4}, {2}},
      {"skip_first=1,wait=1,warmup=0,active=2,repeat=3", {3, 4, 6, 7, 9, 10}, {4, 7, 10}, {}},
      {"wait=3,warmup=1,active=2,repeat=2,skip_first_wait=1", {2, 3, 8, 9}, {3, 9}, {1, 7}},
      {"skip_first=3,wait=2,warmup=2,active=1", {8, 13, 18, 23, 28}, {8, 13, 18, 23, 28},
       {6, 7, 11, 12, 16, 17, 21, 22, 26, 27}},
  };
  for (const ScheduleCase& c : cases) {
    SCOPED_TRACE(c.text);
    const ProfileSchedule s = ProfileSchedule::parse(c.text);
    EXPECT_EQ(steps_where(s, [](ProfileAction a) {
                return a == ProfileAction::record || a == ProfileAction::record_and_save;
              }),
              c.recorded);
    EXPECT_EQ(steps_where(s, [](ProfileAction a) { return a == ProfileAction::record_and_save; }), c.saved);
    EXPECT_EQ(steps_where(s, [](ProfileAction a) { return a == ProfileAction::warmup; }), c.warmup);
  }
  // active=1 alone: every step is a window of its own (repeat 0 cycles to the end).
  const ProfileSchedule every = ProfileSchedule::parse("active=1");
  for (int64_t step = 1; step <= 30; ++step) EXPECT_EQ(every.action(step), ProfileAction::record_and_save);
}

TEST(ProfileSchedule, LastStepsRecordsTheLastOnesOnly) {
  const ProfileSchedule s = ProfileSchedule::last_steps(25, 3);
  EXPECT_EQ(steps_where(s, [](ProfileAction a) {
              return a == ProfileAction::record || a == ProfileAction::record_and_save;
            }),
            (std::vector<int64_t>{23, 24, 25}));
  EXPECT_EQ(steps_where(s, [](ProfileAction a) { return a == ProfileAction::warmup; }), (std::vector<int64_t>{22}));
  EXPECT_EQ(s.action(25), ProfileAction::record_and_save);
  // Fewer steps than asked: all of them.
  EXPECT_EQ(steps_where(ProfileSchedule::last_steps(2, 3), [](ProfileAction a) { return a != ProfileAction::none; }),
            (std::vector<int64_t>{1, 2, 3}));
}

TEST(ProfileSchedule, DescribesWhatItParsed) {
  EXPECT_EQ(ProfileSchedule::parse("active=3,skip_first=5,wait=2,repeat=2,warmup=1").describe(),
            "skip_first=5,wait=2,warmup=1,active=3,repeat=2");
  EXPECT_EQ(ProfileSchedule::parse("wait=1,active=2,skip_first_wait=1").describe(),
            "skip_first=0,wait=1,warmup=0,active=2,repeat=0,skip_first_wait=1");
}

TEST(ProfileSchedule, RefusesWhatPyTorchRefusesNamingTheFlag) {
  for (const char* bad : {"", "active=0", "wait=-1", "active=2,active=3", "activ=2", "active", "active=2.5",
                          "active=x", "active=2,", "skip_first_wait=2", "active=3 "}) {
    SCOPED_TRACE(bad);
    try {
      ProfileSchedule::parse(bad);
      ADD_FAILURE() << "accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--profile-schedule"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("skip_first=5,wait=2"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace zb
