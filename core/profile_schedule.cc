#include "core/profile_schedule.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <sstream>
#include <vector>

#include "core/errors.h"

namespace zb {

namespace {

// Far beyond any run's steps; keeps the schedule's arithmetic (repeat * cycle) within 64 bits.
constexpr int64_t kLargest = 1'000'000'000;

const char* kAccepted =
    "comma-separated key=value pairs with keys skip_first, wait, warmup, active, repeat, skip_first_wait and whole "
    "numbers up to 10^9 (active at least 1, the others at least 0), e.g. "
    "skip_first=5,wait=2,warmup=1,active=3,repeat=2";

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.push_back("");
  return parts;
}

}  // namespace

ProfileSchedule ProfileSchedule::parse(const std::string& text, const std::string& flag) {
  const auto refuse = [&](const std::string& why) {
    throw UsageError(flag + ": " + why + " in '" + text + "'; accepted: " + kAccepted);
  };
  ProfileSchedule s;
  if (text.empty()) refuse("empty");
  std::set<std::string> seen;
  for (const std::string& pair : split(text, ',')) {
    const size_t equals = pair.find('=');
    if (equals == std::string::npos) refuse("'" + pair + "' is not key=value");
    const std::string key = pair.substr(0, equals), value = pair.substr(equals + 1);
    if (!seen.insert(key).second) refuse("'" + key + "' given twice");
    int64_t number = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (value.empty() || error != std::errc() || end != value.data() + value.size())
      refuse("'" + key + "' needs a whole number, not '" + value + "'");
    if (number < 0 || (key == "active" && number < 1)) refuse("'" + key + "' is " + value);
    if (number > kLargest) refuse("'" + key + "' is above " + std::to_string(kLargest));
    if (key == "skip_first") {
      s.skip_first = number;
    } else if (key == "wait") {
      s.wait = number;
    } else if (key == "warmup") {
      s.warmup = number;
    } else if (key == "active") {
      s.active = number;
    } else if (key == "repeat") {
      s.repeat = number;
    } else if (key == "skip_first_wait") {
      if (number > 1) refuse("'skip_first_wait' is 0 or 1");
      s.skip_first_wait = number == 1;
    } else {
      refuse("unknown key '" + key + "'");
    }
  }
  return s;
}

ProfileSchedule ProfileSchedule::last_steps(int64_t last_step, int64_t count) {
  ProfileSchedule s;
  s.active = count < 1 ? 1 : count;
  s.warmup = last_step > s.active ? 1 : 0;  // the step before, where there is one: the profiler's start-up cost
  s.skip_first = std::max<int64_t>(0, last_step - s.active - s.warmup);
  s.repeat = 1;
  return s;
}

ProfileAction ProfileSchedule::action(int64_t step) const {
  int64_t k = step - 1;  // PyTorch's step
  if (k < skip_first) return ProfileAction::none;
  k -= skip_first;
  if (skip_first_wait) k += wait;
  const int64_t cycle = wait + warmup + active;
  if (repeat > 0 && k >= repeat * cycle) return ProfileAction::none;
  const int64_t within = k % cycle;
  if (within < wait) return ProfileAction::none;
  if (within < wait + warmup) return ProfileAction::warmup;
  return within < cycle - 1 ? ProfileAction::record : ProfileAction::record_and_save;
}

std::string ProfileSchedule::describe() const {
  std::string text = "skip_first=" + std::to_string(skip_first) + ",wait=" + std::to_string(wait) +
                     ",warmup=" + std::to_string(warmup) + ",active=" + std::to_string(active) +
                     ",repeat=" + std::to_string(repeat);
  return skip_first_wait ? text + ",skip_first_wait=1" : text;
}

}  // namespace zb
