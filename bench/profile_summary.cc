#include "bench/profile_summary.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>

namespace zb {

namespace {

constexpr double kNsPerMs = 1e6;

struct BusyInterval {
  int64_t start = 0, end = 0;
  ExposedCategory category = ExposedCategory::idle;
};

// Splits [begin, end) among the categories: each moment to the first busy one in ExposedCategory's order, or idle.
std::array<double, kExposedCategories> exposure(const std::vector<BusyInterval>& busy, int64_t begin, int64_t end) {
  std::vector<std::pair<int64_t, int>> changes;  // (time, +(category + 1) at a start, -(category + 1) at an end)
  for (const BusyInterval& b : busy) {
    const int64_t s = std::max(b.start, begin), e = std::min(b.end, end);
    if (s >= e) continue;
    changes.push_back({s, int(b.category) + 1});
    changes.push_back({e, -(int(b.category) + 1)});
  }
  std::sort(changes.begin(), changes.end());
  std::array<int, kExposedCategories> running{};
  std::array<double, kExposedCategories> exposed{};
  const auto attribute = [&](int64_t from, int64_t to) {
    if (to <= from) return;
    int category = int(ExposedCategory::idle);
    for (int c = 0; c < int(ExposedCategory::idle); ++c) {
      if (running[size_t(c)] > 0) {
        category = c;
        break;
      }
    }
    exposed[size_t(category)] += double(to - from) / kNsPerMs;
  };
  int64_t t = begin;
  for (size_t i = 0; i < changes.size();) {
    const int64_t at = changes[i].first;
    attribute(t, at);
    for (; i < changes.size() && changes[i].first == at; ++i) {
      const int change = changes[i].second;
      running[size_t(std::abs(change) - 1)] += change > 0 ? 1 : -1;
    }
    t = at;
  }
  attribute(t, end);
  return exposed;
}

struct RowTotals {
  std::array<double, kExposedCategories> category_ns{};  // the row's category: where most of its time is
  std::vector<std::pair<int64_t, int64_t>> spans;        // its slices, clipped to the steps
  int64_t calls = 0;
  double flops = 0, bytes = 0;
  std::string collective_name;  // the name that tells a collective's kind (a kernel's where the launch was a group)
  std::set<uint64_t> launchers;
};

std::string rate(double per_second, const char* unit) {
  char text[32];
  if (per_second >= 1e12) {
    std::snprintf(text, sizeof text, "%.1f T%s", per_second / 1e12, unit);
  } else if (per_second >= 1e9) {
    std::snprintf(text, sizeof text, "%.1f G%s", per_second / 1e9, unit);
  } else {
    std::snprintf(text, sizeof text, "%.1f M%s", per_second / 1e6, unit);
  }
  return text;
}

}  // namespace

double bus_bandwidth_factor(const std::string& name, int world) {
  const auto has = [&](const char* a, const char* b) {
    return name.find(a) != std::string::npos || name.find(b) != std::string::npos;
  };
  const double n = world;
  if (world < 1) return 0;
  if (has("all_reduce", "AllReduce")) return 2 * (n - 1) / n;
  if (has("reduce_scatter", "ReduceScatter") || has("all_gather", "AllGather")) return (n - 1) / n;
  if (has("broadcast", "Broadcast")) return 1;
  return 0;
}

ProfileSummary summarise(const ProfileWindow& window, const DeviceCeilings& ceilings) {
  ProfileSummary summary;
  const std::vector<const TraceSlice*> steps = window_steps(window);
  if (steps.empty()) return summary;

  std::map<uint64_t, const TraceSlice*> launchers;
  for (const TraceSlice& s : window.slices)
    if (s.id != 0 && !s.lane.device) launchers.emplace(s.id, &s);

  std::vector<BusyInterval> busy;
  std::map<std::string, RowTotals> rows;
  for (const TraceSlice& s : window.slices) {
    const std::optional<ExposedCategory> category = busy_category(s, window.ops_run_on_host);
    if (!category) continue;
    busy.push_back({s.start_ns, s.end_ns, *category});
    // Its parts within the steps (nothing between them counts).
    std::vector<std::pair<int64_t, int64_t>> parts;
    for (const TraceSlice* step : steps) {
      const int64_t start = std::max(s.start_ns, step->start_ns), end = std::min(s.end_ns, step->end_ns);
      if (start < end) parts.push_back({start, end});
    }
    if (parts.empty()) continue;
    const auto launcher = launchers.find(s.launched_by);
    const TraceSlice* by = s.lane.device && launcher != launchers.end() ? launcher->second : nullptr;
    std::string name = by ? by->name : s.name;
    if (s.category == TraceCategory::cpu_optimizer) name = "cpu_optimizer";  // one row; the units are in the trace
    RowTotals& row = rows[name];
    for (const auto& [start, end] : parts) {
      row.category_ns[size_t(*category)] += double(end - start);
      row.spans.push_back({start, end});
    }
    // A collective's kind: its launch's name ("all_gather"), or where that was a group of them, its kernel's.
    const std::string kind = by && by->name != "group" ? by->name : s.name;
    if (row.collective_name.empty() || bus_bandwidth_factor(row.collective_name, 2) == 0) row.collective_name = kind;
    if (by) {
      if (row.launchers.insert(by->id).second) {
        ++row.calls;
        row.flops += by->flops;
        row.bytes += by->bytes;
      }
    } else {
      ++row.calls;
      row.flops += s.flops;
      row.bytes += s.bytes;
    }
  }

  double steps_ms = 0;
  for (const TraceSlice* step : steps) {
    StepExposure e{step->name, double(step->end_ns - step->start_ns) / kNsPerMs,
                   exposure(busy, step->start_ns, step->end_ns)};
    steps_ms += e.step_ms;
    summary.steps.push_back(e);
  }
  summary.mean.name = "mean";
  for (const StepExposure& e : summary.steps) {
    summary.mean.step_ms += e.step_ms / double(summary.steps.size());
    for (int c = 0; c < kExposedCategories; ++c)
      summary.mean.exposed_ms[size_t(c)] += e.exposed_ms[size_t(c)] / double(summary.steps.size());
  }
  const auto largest = std::max_element(summary.mean.exposed_ms.begin(), summary.mean.exposed_ms.end());
  summary.bottleneck = ExposedCategory(largest - summary.mean.exposed_ms.begin());

  for (auto& [name, t] : rows) {
    OperationRow row;
    row.name = name;
    const ExposedCategory category =
        ExposedCategory(std::max_element(t.category_ns.begin(), t.category_ns.end()) - t.category_ns.begin());
    row.category = exposed_category_name(category);
    row.calls = t.calls;
    // (A row's work on several lanes at once, the host update's threads or two streams, counts once: its share of
    // the step is a share of wall time.)
    row.total_ms = covered_ns(t.spans) / kNsPerMs;
    row.mean_ms = t.calls > 0 ? row.total_ms / double(t.calls) : 0;
    row.share_of_steps = steps_ms > 0 ? row.total_ms / steps_ms : 0;
    const double seconds = row.total_ms / 1e3;
    row.flops_per_second = t.flops / seconds;
    row.bytes_per_second = t.bytes / seconds;
    if (category == ExposedCategory::collectives)
      row.bus_bytes_per_second = row.bytes_per_second * bus_bandwidth_factor(t.collective_name, window.world);
    if (row.flops_per_second > 0 && ceilings.flops_per_second > 0) {
      row.share_of_ceiling = row.flops_per_second / ceilings.flops_per_second;
    } else if (row.bytes_per_second > 0 && ceilings.bytes_per_second > 0 && category == ExposedCategory::compute) {
      row.share_of_ceiling = row.bytes_per_second / ceilings.bytes_per_second;
    }
    summary.operations.push_back(row);
  }
  std::sort(summary.operations.begin(), summary.operations.end(), [](const OperationRow& a, const OperationRow& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.name < b.name;
  });
  return summary;
}

std::string format_summary(const ProfileWindow& window, const ProfileSummary& summary, const DeviceCeilings& ceilings,
                           size_t rows) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "profile of %s, rank %d of %d, on %s: %zu recorded step(s)\n", window.config.c_str(),
                window.rank, window.world, window.device_name.c_str(), summary.steps.size());
  out += line;
  if (ceilings.flops_per_second > 0 || ceilings.bytes_per_second > 0) {
    std::snprintf(line, sizeof line, "device ceilings (measured: %s): %s, %s\n", ceilings.how.c_str(),
                  rate(ceilings.flops_per_second, "FLOP/s").c_str(), rate(ceilings.bytes_per_second, "B/s").c_str());
    out += line;
  } else {
    out += "no device ceilings (the CPU backend's loops are a reference: no one shape bounds the others)\n";
  }
  out += window.ops_run_on_host ? "\noperations by total time (host)\n" : "\noperations by total device time\n";
  std::snprintf(line, sizeof line, "%-34s %-13s %7s %10s %9s %7s %16s %9s\n", "operation", "category", "calls",
                "total ms", "mean ms", "% step", "achieved", "% ceiling");
  out += line;
  OperationRow rest{"(the rest)", "", 0};
  for (size_t i = 0; i < summary.operations.size(); ++i) {
    const OperationRow& r = summary.operations[i];
    if (i >= rows) {
      rest.calls += r.calls, rest.total_ms += r.total_ms, rest.share_of_steps += r.share_of_steps;
      continue;
    }
    std::string achieved;
    if (r.bus_bytes_per_second > 0) {
      achieved = rate(r.bus_bytes_per_second, "B/s bus");
    } else if (r.flops_per_second > 0) {
      achieved = rate(r.flops_per_second, "FLOP/s");
    } else if (r.bytes_per_second > 0) {
      achieved = rate(r.bytes_per_second, "B/s");
    }
    std::string ceiling = r.share_of_ceiling >= 0 ? std::to_string(int(r.share_of_ceiling * 100 + 0.5)) + "%" : "";
    std::snprintf(line, sizeof line, "%-34.34s %-13s %7lld %10.3f %9.4f %6.1f%% %16s %9s\n", r.name.c_str(),
                  r.category.c_str(), (long long)r.calls, r.total_ms, r.mean_ms, 100 * r.share_of_steps,
                  achieved.c_str(), ceiling.c_str());
    out += line;
  }
  if (rest.calls > 0) {
    std::snprintf(line, sizeof line, "%-34s %-13s %7lld %10.3f %9s %6.1f%%\n", rest.name.c_str(), "",
                  (long long)rest.calls, rest.total_ms, "", 100 * rest.share_of_steps);
    out += line;
  }
  if (!window.device_work_recorded) {
    out += "\nthe device's own work was not recorded (this build or this process has no CUPTI): its kernels, copies "
           "and collectives are missing, so no exposed times or bottleneck can be told from this window\n";
    return out;
  }
  out += "\nexposed time per step, ms (each moment to the first busy category in this order; they sum to the step)\n";
  std::snprintf(line, sizeof line, "%-20s %10s", "step", "step");
  out += line;
  for (int c = 0; c < kExposedCategories; ++c) {
    std::snprintf(line, sizeof line, " %13s", exposed_category_name(ExposedCategory(c)));
    out += line;
  }
  out += "\n";
  std::vector<StepExposure> lines = summary.steps;
  lines.push_back(summary.mean);
  for (const StepExposure& e : lines) {
    std::snprintf(line, sizeof line, "%-20s %10.3f", e.name.c_str(), e.step_ms);
    out += line;
    for (double ms : e.exposed_ms) {
      std::snprintf(line, sizeof line, " %13.3f", ms);
      out += line;
    }
    out += "\n";
  }
  const double share = summary.mean.step_ms > 0
                           ? summary.mean.exposed_ms[size_t(summary.bottleneck)] / summary.mean.step_ms
                           : 0;
  std::snprintf(line, sizeof line, "\nbottleneck: %s (%.0f%% of the mean step exposed)\n",
                exposed_category_name(summary.bottleneck), 100 * share);
  out += line;
  return out;
}

}  // namespace zb
