#include "core/device.h"

#include <charconv>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

std::string Device::to_string() const { return is_cpu() ? "cpu" : cat("cuda:", index); }

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int ordinal = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (ec == std::errc() && end == digits.data() + digits.size() && ordinal >= 0) return Device::cuda(ordinal);
  }
  throw UsageError(cat("unknown device '", text, "' (accepted: cpu, cuda, cuda:N)"));
}

}  // namespace zb
