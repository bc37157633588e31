#include "bench/profile_window.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <set>
#include <tuple>

namespace zb {

const char* exposed_category_name(ExposedCategory category) {
  switch (category) {
    case ExposedCategory::compute: return "compute";
    case ExposedCategory::collectives: return "collectives";
    case ExposedCategory::copies: return "copies";
    case ExposedCategory::cpu_optimizer: return "cpu_optimizer";
    case ExposedCategory::nvme: return "nvme";
    case ExposedCategory::idle: return "idle";
  }
  return "?";
}

const char* exposed_category_colour(ExposedCategory category) {
  switch (category) {
    case ExposedCategory::compute: return "#4c78a8";
    case ExposedCategory::collectives: return "#f58518";
    case ExposedCategory::copies: return "#54a24b";
    case ExposedCategory::cpu_optimizer: return "#b279a2";
    case ExposedCategory::nvme: return "#9d755d";
    case ExposedCategory::idle: return "#d9d9d9";
  }
  return "#000000";
}

std::optional<ExposedCategory> busy_category(const TraceSlice& slice, bool ops_run_on_host) {
  switch (slice.category) {
    case TraceCategory::kernel: return ExposedCategory::compute;
    case TraceCategory::copy: return ExposedCategory::copies;
    case TraceCategory::cpu_optimizer: return ExposedCategory::cpu_optimizer;
    case TraceCategory::nvme: return ExposedCategory::nvme;
    case TraceCategory::op:
      if (slice.lane.device || ops_run_on_host) return ExposedCategory::compute;
      return std::nullopt;
    case TraceCategory::collective:
      if (slice.lane.device || ops_run_on_host) return ExposedCategory::collectives;
      return std::nullopt;
    case TraceCategory::step:
    case TraceCategory::unit:
    case TraceCategory::wait: return std::nullopt;
  }
  return std::nullopt;
}

namespace {

std::string name_of(const ProfileWindow& window, const TraceLane& lane) {
  const auto it = window.lane_names.find(lane);
  return it != window.lane_names.end() ? it->second : std::string();
}

// A name's sort key: a rank for the names that lead (and the unnamed last), its text before a trailing number,
// and that number.
std::tuple<int, std::string, long long, uint32_t> lane_key(const ProfileWindow& window, const TraceLane& lane) {
  const std::string name = name_of(window, lane);
  const int leading = !lane.device ? (name == "main" ? 0 : name == "host update" ? 1 : 2)
                                   : (name == "compute"         ? 0
                                      : name == "communication" ? 1
                                      : name.empty() || name.rfind("stream ", 0) == 0 ? 3  // unnamed: by id
                                                                                      : 2);
  size_t digits = name.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1]))) --digits;
  const long long number = digits < name.size() && name.size() - digits < 18 ? std::stoll(name.substr(digits)) : -1;
  return {leading, name.substr(0, digits), number, lane.id};
}

}  // namespace

std::vector<TraceLane> ordered_lanes(const ProfileWindow& window) {
  std::set<TraceLane> used;
  for (const TraceSlice& s : window.slices) used.insert(s.lane);
  std::vector<TraceLane> lanes(used.begin(), used.end());
  std::sort(lanes.begin(), lanes.end(), [&](const TraceLane& a, const TraceLane& b) {
    if (a.device != b.device) return !a.device;
    return lane_key(window, a) < lane_key(window, b);
  });
  return lanes;
}

std::vector<const TraceSlice*> window_steps(const ProfileWindow& window) {
  std::vector<const TraceSlice*> steps;
  for (const TraceSlice& s : window.slices)
    if (s.category == TraceCategory::step) steps.push_back(&s);
  std::sort(steps.begin(), steps.end(),
            [](const TraceSlice* a, const TraceSlice* b) { return a->start_ns < b->start_ns; });
  return steps;
}

double covered_ns(std::vector<std::pair<int64_t, int64_t>>& spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0;
  int64_t covered_to = INT64_MIN;
  for (const auto& [start, end] : spans) {
    const int64_t from = std::max(start, covered_to);
    if (end > from) total += double(end - from);
    covered_to = std::max(covered_to, end);
  }
  return total;
}

}  // namespace zb
