// One recorded window of a profile (bench/profiler.h): the slices of its steps on one rank, the names of their
// lanes, and how each slice counts when the step's time is split by what bounds it. The summary
// (bench/profile_summary.h), the Chrome trace (bench/chrome_trace.h) and the timeline (bench/profile_timeline.h)
// are all read from it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/trace.h"

namespace zb {

struct ProfileWindow {
  std::string config;  // the configuration's label, as in the file names ("stage3", "cpu_full", "train")
  int rank = 0;
  int world = 1;
  // Host and device slices on rank 0's clock (each rank's trace_clock_ns() plus its offset to rank 0's).
  std::vector<TraceSlice> slices;
  std::map<TraceLane, std::string> lane_names;
  // The CPU backend runs its ops on the host: their slices are the compute itself. On a GPU an op's host slice
  // is its launch, and its kernels (device slices) are the compute.
  bool ops_run_on_host = false;
  // False where a GPU's own work was not recorded (no CUPTI): the window has the host's slices only, and no
  // exposed times can be told from them.
  bool device_work_recorded = true;
  std::string device_name;  // "NVIDIA H200", "cpu"
};

// What a moment of a step is spent on, as the summary splits a step: at each moment the first of these that is
// busy (on any lane) takes it, so that the parts sum to the step. Exposed time of a category is time when it runs
// and nothing before it in this list does: collectives that overlap compute are hidden, those that do not are
// exposed.
enum class ExposedCategory { compute, collectives, copies, cpu_optimizer, nvme, idle };
constexpr int kExposedCategories = 6;
const char* exposed_category_name(ExposedCategory category);  // "compute", "collectives", ..., "idle"
// The colour of a category in the timeline and the README's pictures ("#rrggbb").
const char* exposed_category_colour(ExposedCategory category);

// The busy category of a slice: kernels are compute (NCCL's are collectives), copies copies, the host update
// cpu_optimizer, NVMe transfers nvme; an op or a collective's host slice counts only where ops run on the host
// (the CPU backend). Steps, units and waits are none: they frame or idle, they do not work.
std::optional<ExposedCategory> busy_category(const TraceSlice& slice, bool ops_run_on_host);

// The lanes that hold slices, in the order a reader wants them: the host's first (the main thread, the host
// update's, then the others by name, numbers within names compared as numbers: "cpu optimizer 2" before "cpu
// optimizer 10"), then the device's streams (compute, communication, the others by name, the unnamed by id).
std::vector<TraceLane> ordered_lanes(const ProfileWindow& window);

// The time in ns covered by any of the spans (start, end): overlapping spans count once. Sorts them.
double covered_ns(std::vector<std::pair<int64_t, int64_t>>& spans);

// The window's steps: its slices of category step, by start.
std::vector<const TraceSlice*> window_steps(const ProfileWindow& window);

}  // namespace zb
