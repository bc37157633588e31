// GpuTelemetry: what one GPU's clock and power did while a span of work ran (the timed steps), sampled
// through NVML on a thread of its own: the median SM clock, the median power draw, and every reason the
// driver gave for holding the clocks down (the power cap, thermal or hardware slowdown, ...). A rank that is
// slower than its peers usually shows why here, which is what a multi-node user checks first.
//
// NVML ships with the NVIDIA driver, not with the CUDA toolkit: the library is opened at run time
// (libnvidia-ml.so.1) rather than linked, so that the programs still start where there is no driver (the CPU
// backend, CI). Where it cannot be opened, or the device is not found, the summary has no samples and says why.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace zb {

// A reason the driver held the clocks down, and the share of the samples that showed it.
struct ClockLimitReason {
  std::string name;
  double share = 0;
};

struct GpuTelemetrySummary {
  int samples = 0;
  std::optional<double> sm_clock_mhz;           // median over the samples
  std::optional<double> power_w;                // median over the samples
  std::optional<double> power_limit_w;          // the enforced power cap
  std::vector<ClockLimitReason> limit_reasons;  // every reason seen, in bit order, named by limit_reason_names
  std::string unavailable;                      // why there are no figures ("" when there are)
};

// One reading of the GPU.
struct TelemetrySample {
  double sm_clock_mhz = 0, power_w = 0;
  uint64_t reasons = 0;  // nvmlClocksEventReasons
};

// The summary of `samples` taken over `sampled_ms` of sampling every `period_ms`. Far fewer samples than the
// span was due (under a quarter of at least four) mean the readings waited on the driver, which another program
// may hold (pinning host memory, starting a context): the few there are were taken at unknown moments, so the
// summary gives no clock or power and says why instead of a median that looks like a measurement.
GpuTelemetrySummary summarise_samples(const std::vector<TelemetrySample>& samples, double sampled_ms,
                                      double period_ms);

// NVML's clock-limiting reasons (a bit mask, nvmlClocksEventReasons) as short names, in bit order: "idle",
// "application clocks", "power cap", "hardware slowdown", "sync boost", "thermal (software)",
// "thermal (hardware)", "power brake", "display clocks"; unknown bits as "reason 0x...".
std::vector<std::string> limit_reason_names(uint64_t mask);

class GpuTelemetry {
 public:
  // pci_bus_id: the GPU as cuda_device_pci_bus_id names it; empty for no GPU (the CPU backend).
  explicit GpuTelemetry(const std::string& pci_bus_id,
                        std::chrono::milliseconds period = std::chrono::milliseconds(20));
  ~GpuTelemetry();
  GpuTelemetry(const GpuTelemetry&) = delete;
  GpuTelemetry& operator=(const GpuTelemetry&) = delete;

  // Sampling runs between start and stop; several spans add up (samples and time). Neither throws.
  void start();
  void stop();
  // Of every sample since construction or clear.
  GpuTelemetrySummary summary() const;
  void clear();

 private:
  void sample_until_stopped();

  void* device_ = nullptr;  // nvmlDevice_t
  std::string unavailable_;
  std::optional<double> power_limit_w_;
  std::chrono::milliseconds period_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<TelemetrySample> samples_;
  std::chrono::steady_clock::time_point span_start_;
  double sampled_ms_ = 0;  // the spans between start and stop so far
  std::thread sampler_;
};

}  // namespace zb
