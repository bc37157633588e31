#include "bench/step_breakdown.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace zb {

namespace {

constexpr double kNsPerMs = 1e6;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A unit's pass slice: its unit and whether it is the forward.
struct Pass {
  const TraceSlice* slice;
  std::string unit;
  bool forward;
};

UnitTimes unit_named(const std::string& name) {
  UnitTimes u;
  u.unit = name;
  return u;
}

}  // namespace

double StepBreakdown::accounted_ms() const {
  double total = optimizer_ms + cpu_optimizer_ms + other_ms;
  for (const UnitTimes& u : units) total += u.forward_ms + u.backward_ms;
  return total;
}

StepBreakdown step_breakdown(const ProfileWindow& window) {
  StepBreakdown out;
  const std::vector<const TraceSlice*> steps = window_steps(window);
  out.steps = int(steps.size());
  if (steps.empty()) return out;
  for (const TraceSlice* s : steps) out.step_ms += double(s->end_ns - s->start_ns) / kNsPerMs;

  // Passes by host lane, in start order; units in the order of their first forward.
  std::map<TraceLane, std::vector<Pass>> passes;
  std::vector<std::pair<int64_t, std::string>> first_forward;
  std::map<std::string, size_t> unit_index;
  for (const TraceSlice& s : window.slices) {
    if (s.category != TraceCategory::unit || s.lane.device) continue;
    const bool forward = ends_with(s.name, " forward");
    if (!forward && !ends_with(s.name, " backward")) continue;  // (the host update's per-unit slices)
    const std::string unit = s.name.substr(0, s.name.rfind(' '));
    passes[s.lane].push_back({&s, unit, forward});
    if (forward) first_forward.emplace_back(s.start_ns, unit);
  }
  std::sort(first_forward.begin(), first_forward.end());
  for (const auto& [start, unit] : first_forward) {
    if (unit_index.emplace(unit, out.units.size()).second) out.units.push_back(unit_named(unit));
  }
  for (auto& [lane, list] : passes) {
    std::sort(list.begin(), list.end(),
              [](const Pass& a, const Pass& b) { return a.slice->start_ns < b.slice->start_ns; });
    for (const Pass& p : list) {  // (a unit seen only in a backward: after the others)
      if (unit_index.emplace(p.unit, out.units.size()).second) out.units.push_back(unit_named(p.unit));
    }
  }
  // The innermost pass holding `at` on `lane` (passes do not nest across units, so the last that began does).
  auto pass_at = [&](const TraceLane& lane, int64_t at) -> const Pass* {
    const auto it = passes.find(lane);
    if (it == passes.end()) return nullptr;
    const std::vector<Pass>& list = it->second;
    auto after =
        std::upper_bound(list.begin(), list.end(), at, [](int64_t t, const Pass& p) { return t < p.slice->start_ns; });
    while (after != list.begin()) {
      --after;
      if (after->slice->end_ns > at) return &*after;
      if (after->slice->end_ns <= at) break;
    }
    return nullptr;
  };
  auto is_update = [](const TraceSlice& op) { return op.name.find("optimizer") != std::string::npos; };
  auto add_compute = [&](const TraceSlice& op, double ns) {
    const double ms = ns / kNsPerMs;
    if (is_update(op)) {
      out.optimizer_ms += ms;
    } else if (const Pass* p = pass_at(op.lane, op.start_ns)) {
      UnitTimes& u = out.units[unit_index.at(p->unit)];
      (p->forward ? u.forward_ms : u.backward_ms) += ms;
    } else {
      out.other_ms += ms;
    }
  };

  std::unordered_map<uint64_t, const TraceSlice*> ops_by_id;
  std::vector<std::pair<int64_t, int64_t>> host_update;
  for (const TraceSlice& s : window.slices) {
    switch (s.category) {
      case TraceCategory::op:
        if (s.lane.device) break;
        if (window.ops_run_on_host) {
          add_compute(s, double(s.end_ns - s.start_ns));
        } else if (s.id != 0) {
          ops_by_id.emplace(s.id, &s);
        }
        break;
      case TraceCategory::collective:
        // (The communicator's copies, on its stream, move offloaded data: copies, not collectives.)
        if (s.lane.device || s.bytes <= 0 || s.name == "copy") break;
        {
          // A group is named by its collectives' kind where they share one (its detail).
          const std::string& kind = s.name == "group" && !s.detail.empty() ? s.detail : s.name;
          if (const Pass* p = pass_at(s.lane, s.start_ns)) {
            out.units[unit_index.at(p->unit)].collective_bytes[kind] += s.bytes;
          } else {
            out.collective_bytes_outside_units[kind] += s.bytes;
          }
        }
        break;
      case TraceCategory::cpu_optimizer: host_update.emplace_back(s.start_ns, s.end_ns); break;
      default: break;
    }
  }
  if (!window.ops_run_on_host) {
    for (const TraceSlice& s : window.slices) {
      if (s.category != TraceCategory::kernel || !s.lane.device) continue;
      const auto op = ops_by_id.find(s.launched_by);
      const double ns = double(s.end_ns - s.start_ns);
      if (op != ops_by_id.end()) {
        add_compute(*op->second, ns);
      } else {
        out.other_ms += ns / kNsPerMs;  // (a kernel no traced op launched)
      }
    }
  }
  out.cpu_optimizer_ms = covered_ns(host_update) / kNsPerMs;

  // Per step.
  const double n = double(out.steps);
  for (UnitTimes& u : out.units) {
    u.forward_ms /= n;
    u.backward_ms /= n;
    for (auto& [kind, bytes] : u.collective_bytes) bytes /= n;
  }
  for (auto& [kind, bytes] : out.collective_bytes_outside_units) bytes /= n;
  out.optimizer_ms /= n;
  out.cpu_optimizer_ms /= n;
  out.other_ms /= n;
  out.step_ms /= n;
  return out;
}

}  // namespace zb
