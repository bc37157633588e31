// What train prints: one line a step, and a summary of the steady-state steps (the time split by phase and
// the peak memory by pool).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/tracking_allocator.h"
#include "engine/trainer.h"

namespace zb {

struct ThroughputModel {
  double flops_per_token = 0;           // training FLOPs per token (models/transformer_config.h)
  std::optional<double> peak_tflops;    // one device's dense bf16 peak, for MFU
  int devices = 1;                      // the rates are per device: tokens/s of all of them / devices
  std::string device_kind = "GPU";      // how the rates name a device ("GPU", or "rank" on the CPU backend)
};

std::string format_step(const StepStats& s, int64_t num_steps, const ThroughputModel& model);

// Averages of the steps after the first `warmup` (at least the last step counts).
std::string format_summary(const std::vector<StepStats>& steps, int64_t warmup, const ThroughputModel& model,
                           const TrackingAllocator& allocator);

}  // namespace zb
