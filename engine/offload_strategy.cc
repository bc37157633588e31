#include "engine/offload_strategy.h"

#include <iomanip>
#include <sstream>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

OffloadStrategy parse_offload_strategy(std::string_view name) {
  if (name == "none") return OffloadStrategy::none;
  if (name == "cpu_optimizer") return OffloadStrategy::cpu_optimizer;
  if (name == "nvme") return OffloadStrategy::nvme;
  if (name == "cpu_full") return OffloadStrategy::cpu_full;
  throw UsageError(cat("unknown offload strategy '", name, "' (accepted: none, cpu_optimizer, cpu_full, nvme)"));
}

std::string_view offload_strategy_name(OffloadStrategy strategy) {
  switch (strategy) {
    case OffloadStrategy::cpu_optimizer: return "cpu_optimizer";
    case OffloadStrategy::cpu_full: return "cpu_full";
    case OffloadStrategy::nvme: return "nvme";
    case OffloadStrategy::none: break;
  }
  return "none";
}

void validate_offload_ratio(double ratio, OffloadStrategy strategy) {
  if (!(ratio > 0 && ratio <= 1)) {
    throw UsageError(cat("must be a fraction in (0, 1], got ", std::setprecision(15), ratio));
  }
  const bool takes_ratio = strategy == OffloadStrategy::cpu_optimizer || strategy == OffloadStrategy::nvme;
  if (ratio < 1 && !takes_ratio) {
    throw UsageError(cat(ratio, " keeps part of the optimizer state on the GPU, which only the optimizer offloads ",
                         "do (accepted with cpu_optimizer and nvme; ", offload_strategy_name(strategy), " takes 1)"));
  }
}

StrategySpec parse_strategy_spec(const std::string& spec) {
  const size_t colon = spec.find(':');
  StrategySpec out;
  out.strategy = parse_offload_strategy(spec.substr(0, colon));
  if (colon != std::string::npos) {
    const std::string ratio = spec.substr(colon + 1);
    size_t used = 0;
    try {
      out.ratio = std::stod(ratio, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (ratio.empty() || used != ratio.size()) {
      throw UsageError(cat(spec, ": the ratio after the colon must be a number in (0, 1], got '", ratio, "'"));
    }
    try {
      validate_offload_ratio(out.ratio, out.strategy);
    } catch (const UsageError& e) {
      throw UsageError(cat(spec, ": ", e.what()));
    }
  }
  return out;
}

std::string offload_spec_name(OffloadStrategy strategy, double ratio) {
  std::string name(offload_strategy_name(strategy));
  if (ratio >= 1) return name;
  std::ostringstream text;
  text << name << ':' << std::setprecision(15) << ratio;  // 0.8 as "0.8", and 0.9999999 not as 1
  return text.str();
}

}  // namespace zb
