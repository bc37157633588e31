#include "bench/gpu_peaks.h"

#include <utility>
#include <vector>

namespace zb {

std::optional<double> bf16_peak_tflops(const std::string& gpu_name) {
  // First match wins: more specific names come before the names they contain.
  static const std::vector<std::pair<std::string, double>> peaks = {
      {"H200", 989.4},     {"H100 PCIe", 756.5}, {"H100 NVL", 835.5},  {"H100", 989.4},   {"GH200", 989.4},
      {"B200", 2250.0},    {"A100", 312.0},      {"A800", 312.0},      {"L40S", 362.1},   {"L40", 181.0},
      {"L4", 121.0},       {"A10G", 70.0},       {"A10", 125.0},       {"RTX 4090", 165.2}, {"RTX 3090", 71.0},
  };
  for (const auto& [name, tflops] : peaks)
    if (gpu_name.find(name) != std::string::npos) return tflops;
  return std::nullopt;
}

}  // namespace zb
