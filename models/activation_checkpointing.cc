#include "models/activation_checkpointing.h"

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

ActivationCheckpointing parse_activation_checkpointing(std::string_view name) {
  if (name == "none") return ActivationCheckpointing::none;
  if (name == "full") return ActivationCheckpointing::full;
  if (name == "selective") return ActivationCheckpointing::selective;
  throw UsageError(cat("unknown activation checkpointing '", name, "' (accepted: none, full, selective)"));
}

std::string_view activation_checkpointing_name(ActivationCheckpointing mode) {
  switch (mode) {
    case ActivationCheckpointing::full: return "full";
    case ActivationCheckpointing::selective: return "selective";
    case ActivationCheckpointing::none: break;
  }
  return "none";
}

}  // namespace zb
