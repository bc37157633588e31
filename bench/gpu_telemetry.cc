#include "bench/gpu_telemetry.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bench/percentile.h"
#include "core/strings.h"

namespace zb {

namespace {

// The few NVML entry points used, declared as NVML's C API defines them (nvml.h is part of the driver's
// development files, which build machines often lack; the ABI of these calls has been stable since NVML's
// _v2 entry points).
using NvmlReturn = int;  // nvmlReturn_t: 0 is NVML_SUCCESS
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM

struct NvmlLibrary {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*device_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*power_usage)(NvmlDevice, unsigned*) = nullptr;           // milliwatts
  NvmlReturn (*enforced_power_limit)(NvmlDevice, unsigned*) = nullptr;  // milliwatts
  NvmlReturn (*clock_reasons)(NvmlDevice, unsigned long long*) = nullptr;
  std::string error;  // why it is unusable ("" when usable)
};

template <typename Function>
void bind(void* library, const char* name, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, name));
}

NvmlLibrary open_nvml() {
  NvmlLibrary n;
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    n.error = "NVML (libnvidia-ml.so.1, part of the NVIDIA driver) could not be opened";
    return n;
  }
  // The library stays open for the process's life: NVML keeps state that other users in the process share.
  bind(library, "nvmlInit_v2", n.init);
  bind(library, "nvmlDeviceGetHandleByPciBusId_v2", n.device_by_pci_bus_id);
  bind(library, "nvmlDeviceGetClockInfo", n.clock_info);
  bind(library, "nvmlDeviceGetPowerUsage", n.power_usage);
  bind(library, "nvmlDeviceGetEnforcedPowerLimit", n.enforced_power_limit);
  bind(library, "nvmlDeviceGetCurrentClocksEventReasons", n.clock_reasons);  // drivers from 535 on
  if (!n.clock_reasons) bind(library, "nvmlDeviceGetCurrentClocksThrottleReasons", n.clock_reasons);
  if (!n.init || !n.device_by_pci_bus_id || !n.clock_info || !n.power_usage || !n.clock_reasons) {
    n.error = "NVML lacks the clock and power queries (driver too old)";
  } else if (const NvmlReturn status = n.init(); status != kNvmlSuccess) {
    n.error = "NVML did not initialise (nvmlInit_v2 returned " + std::to_string(status) + ")";
  }
  return n;
}

// Opened once per process, on first use; read-only after that.
const NvmlLibrary& nvml() {
  static const NvmlLibrary library = open_nvml();
  return library;
}

}  // namespace

std::vector<std::string> limit_reason_names(uint64_t mask) {
  static const char* const names[] = {"idle",          "application clocks", "power cap",          "hardware slowdown",
                                      "sync boost",    "thermal (software)", "thermal (hardware)", "power brake",
                                      "display clocks"};
  std::vector<std::string> out;
  for (int bit = 0; bit < 64; ++bit) {
    if (!(mask >> bit & 1)) continue;
    if (bit < int(std::size(names))) {
      out.emplace_back(names[bit]);
    } else {
      char text[32];
      std::snprintf(text, sizeof text, "reason 0x%llx", 1ull << bit);
      out.emplace_back(text);
    }
  }
  return out;
}

GpuTelemetry::GpuTelemetry(const std::string& pci_bus_id, std::chrono::milliseconds period) : period_(period) {
  if (pci_bus_id.empty()) {
    unavailable_ = "no GPU";
    return;
  }
  const NvmlLibrary& n = nvml();
  if (!n.error.empty()) {
    unavailable_ = n.error;
    return;
  }
  NvmlDevice device = nullptr;
  if (n.device_by_pci_bus_id(pci_bus_id.c_str(), &device) != kNvmlSuccess) {
    unavailable_ = "NVML does not know the GPU at PCI bus id " + pci_bus_id;
    return;
  }
  device_ = device;
  unsigned milliwatts = 0;
  if (n.enforced_power_limit && n.enforced_power_limit(device, &milliwatts) == kNvmlSuccess) {
    power_limit_w_ = milliwatts / 1e3;
  }
}

GpuTelemetry::~GpuTelemetry() {
  stop();
}

void GpuTelemetry::start() {
  if (!device_ || sampler_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = false;
    span_start_ = std::chrono::steady_clock::now();
  }
  sampler_ = std::thread([this] { sample_until_stopped(); });
}

void GpuTelemetry::stop() {
  if (!sampler_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  sampler_.join();
  std::lock_guard lock(mutex_);
  sampled_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - span_start_).count();
}

void GpuTelemetry::sample_until_stopped() {
  const NvmlLibrary& n = nvml();
  NvmlDevice device = device_;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    unsigned mhz = 0, milliwatts = 0;
    unsigned long long reasons = 0;
    const bool ok = n.clock_info(device, kNvmlClockSm, &mhz) == kNvmlSuccess &&
                    n.power_usage(device, &milliwatts) == kNvmlSuccess &&
                    n.clock_reasons(device, &reasons) == kNvmlSuccess;
    lock.lock();
    if (ok) samples_.push_back({double(mhz), milliwatts / 1e3, uint64_t(reasons)});
    wake_.wait_for(lock, period_, [this] { return stopping_; });
  }
}

GpuTelemetrySummary summarise_samples(const std::vector<TelemetrySample>& samples, double sampled_ms,
                                      double period_ms) {
  GpuTelemetrySummary s;
  s.samples = int(samples.size());
  if (samples.empty()) {
    s.unavailable = "no samples taken";
    return s;
  }
  const double due = period_ms > 0 ? sampled_ms / period_ms : 0;
  if (due >= 4 && double(samples.size()) < due / 4) {
    s.unavailable = cat("only ", samples.size(), " of ", std::lround(due), " samples due in ", std::lround(sampled_ms),
                        " ms: NVML waited on the driver (another program using it?)");
    return s;
  }
  std::vector<double> clocks, powers;
  int by_bit[64] = {};
  for (const TelemetrySample& sample : samples) {
    clocks.push_back(sample.sm_clock_mhz);
    powers.push_back(sample.power_w);
    for (int bit = 0; bit < 64; ++bit) by_bit[bit] += int(sample.reasons >> bit & 1);
  }
  s.sm_clock_mhz = median(clocks);
  s.power_w = median(powers);
  for (int bit = 0; bit < 64; ++bit) {
    if (by_bit[bit] == 0) continue;
    s.limit_reasons.push_back({limit_reason_names(1ull << bit).front(), double(by_bit[bit]) / double(samples.size())});
  }
  return s;
}

GpuTelemetrySummary GpuTelemetry::summary() const {
  std::lock_guard lock(mutex_);
  GpuTelemetrySummary s = summarise_samples(samples_, sampled_ms_, double(period_.count()));
  if (samples_.empty() && !unavailable_.empty()) s.unavailable = unavailable_;
  s.power_limit_w = power_limit_w_;
  return s;
}

void GpuTelemetry::clear() {
  std::lock_guard lock(mutex_);
  samples_.clear();
  sampled_ms_ = 0;
}

}  // namespace zb
