// Where memory lives and work runs: the host CPU or one CUDA device.
#pragma once

#include <string>
#include <string_view>

namespace zb {

struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;  // the CUDA device ordinal; 0 for cpu

  static Device cpu() { return {Kind::cpu, 0}; }
  static Device cuda(int ordinal = 0) { return {Kind::cuda, ordinal}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;
};

// Parses "cpu", "cuda" or "cuda:N"; throws UsageError otherwise.
Device parse_device(std::string_view text);

}  // namespace zb
