// The summary of a recorded window (bench/profile_window.h): its operations by total time, and each step split by
// what was exposed in it, as a table for the console and profile_<config>_rank<r>.txt, and as numbers for the
// configuration's record.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "bench/profile_window.h"

namespace zb {

// What the device can do at best, measured on it (bench/device_ceilings.h): the summary sets each operation's
// rate against these. Zero: not known (that share is not shown).
struct DeviceCeilings {
  double flops_per_second = 0;  // a large bf16 GEMM's (the backend's data type)
  double bytes_per_second = 0;  // a large copy within the device's memory (read + write)
  std::string how;              // how they were measured, for the summary's header
};

// One operation of the window: an engine operation (its kernels' device time on a GPU, its own time on the CPU
// backend), a collective, a copy, the host update or an NVMe transfer; device work no operation launched is one
// row per kernel name. Its time is wall time: where its slices overlap (the host update's threads) it counts
// once. Its category is where most of its slices' time is.
struct OperationRow {
  std::string name;
  std::string category;  // exposed_category_name of its work: compute, collectives, copies, cpu_optimizer, nvme
  int64_t calls = 0;
  double total_ms = 0, mean_ms = 0;
  double share_of_steps = 0;  // total over the window's steps' summed time
  double flops_per_second = 0, bytes_per_second = 0;  // achieved (0: its work is not known)
  double bus_bytes_per_second = 0;                   // collectives: NCCL's bus bandwidth (0 otherwise)
  double share_of_ceiling = -1;                      // of the device's FLOP/s, or else bytes/s (-1: none)
};

struct StepExposure {
  std::string name;  // "ProfilerStep#9"
  double step_ms = 0;
  std::array<double, kExposedCategories> exposed_ms{};  // by ExposedCategory, summing to step_ms
};

struct ProfileSummary {
  std::vector<OperationRow> operations;  // by total time, largest first
  std::vector<StepExposure> steps;
  StepExposure mean;  // over the steps ("mean")
  // The category of the largest exposed time over the steps, idle included: what bounds the step.
  ExposedCategory bottleneck = ExposedCategory::idle;
};

ProfileSummary summarise(const ProfileWindow& window, const DeviceCeilings& ceilings);

// The summary as text: a header (configuration, rank, steps, device and ceilings), the operations (the first
// `rows`, the rest summed in one line), the exposed time of each step and their mean, and the bottleneck.
std::string format_summary(const ProfileWindow& window, const ProfileSummary& summary, const DeviceCeilings& ceilings,
                           size_t rows = 30);

// NCCL's bus bandwidth factor of a collective over `world` ranks, by its name (all_reduce / AllReduce: 2(n-1)/n;
// reduce_scatter, all_gather: (n-1)/n; broadcast: 1; 0 for anything else): the bus bandwidth is the bytes over
// the time, times this, comparable across collectives and rank counts.
double bus_bandwidth_factor(const std::string& collective_name, int world);

}  // namespace zb
