#include "kernels/optimizer_params.h"

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

OptimizerKind parse_optimizer_kind(std::string_view name) {
  if (name == "adamw") return OptimizerKind::adamw;
  if (name == "adam") return OptimizerKind::adam;
  if (name == "sgd") return OptimizerKind::sgd;
  throw UsageError(cat("unknown optimizer '", name, "' (accepted: adamw, adam, sgd)"));
}

std::string_view optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adamw: return "adamw";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::sgd: return "sgd";
  }
  return "?";
}

}  // namespace zb
