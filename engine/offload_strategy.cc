#include "engine/offload_strategy.h"

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

}  // namespace zb
