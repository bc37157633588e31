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


void set_optimizer(OptimizerParams& params, std::string_view name) {
  constexpr std::string_view kEightBit = "8bit";
  const bool eight_bit = name.size() > kEightBit.size() && name.ends_with(kEightBit);
  const std::string_view kind = eight_bit ? name.substr(0, name.size() - kEightBit.size()) : name;
  if (kind != "adamw" && kind != "adam" && kind != "sgd") {
    throw UsageError(cat("unknown optimizer '", name, "' (accepted: adamw, adam, sgd, adamw8bit, adam8bit)"));
  }
  if (eight_bit && kind == "sgd") {
    throw UsageError(cat("unknown optimizer '", name, "' (8-bit moments are Adam's: adamw8bit, adam8bit)"));
  }
  params.kind = parse_optimizer_kind(kind);
  params.moments_8bit = eight_bit;
}

std::string optimizer_name(const OptimizerParams& params) {
  return cat(optimizer_kind_name(params.kind), params.moments_8bit ? "8bit" : "");
}

}  // namespace zb
