#include "models/lora.h"

#include "core/errors.h"
#include "core/strings.h"
#include "models/transformer_config.h"

namespace zb {

LoraTargets parse_lora_targets(std::string_view name) {
  if (name == "attention") return LoraTargets::attention;
  if (name == "mlp") return LoraTargets::mlp;
  if (name == "all") return LoraTargets::all;
  throw Error(cat("unknown LoRA targets '", name, "' (attention, mlp or all)"));
}

std::string_view lora_targets_name(LoraTargets targets) {
  switch (targets) {
    case LoraTargets::attention: return "attention";
    case LoraTargets::mlp: return "mlp";
    case LoraTargets::all: return "all";
  }
  return "?";
}

std::string lora_description(const LoraConfig& lora) {
  if (!lora.enabled()) return "none";
  return cat("rank ", lora.rank, ", alpha ", lora.alpha, ", ", lora_targets_name(lora.targets),
             lora.dropout > 0 ? cat(", dropout ", lora.dropout) : std::string());
}

std::string_view adapted_linear_name(AdaptedLinear linear) {
  switch (linear) {
    case AdaptedLinear::qkv: return "attn.qkv";
    case AdaptedLinear::attn_proj: return "attn.proj";
    case AdaptedLinear::fc: return "mlp.fc";
    case AdaptedLinear::mlp_proj: return "mlp.proj";
  }
  return "?";
}

int64_t adapted_linear_in(const TransformerConfig& c, AdaptedLinear linear) {
  switch (linear) {
    case AdaptedLinear::qkv: return c.d_model;
    case AdaptedLinear::attn_proj: return c.attention_width();
    case AdaptedLinear::fc: return c.d_model;
    case AdaptedLinear::mlp_proj: return c.d_ff;
  }
  return 0;
}

int64_t adapted_linear_out(const TransformerConfig& c, AdaptedLinear linear) {
  switch (linear) {
    case AdaptedLinear::qkv: return c.qkv_width();
    case AdaptedLinear::attn_proj: return c.d_model;
    case AdaptedLinear::fc: return c.mlp_in_width();
    case AdaptedLinear::mlp_proj: return c.d_model;
  }
  return 0;
}

bool has_adapter(const TransformerConfig& c, AdaptedLinear linear) {
  if (!c.lora.enabled()) return false;
  const bool attention = linear == AdaptedLinear::qkv || linear == AdaptedLinear::attn_proj;
  return c.lora.targets == LoraTargets::all || (c.lora.targets == LoraTargets::attention) == attention;
}

int64_t lora_parameter_count(const TransformerConfig& c) {
  int64_t per_block = 0;
  for (AdaptedLinear linear : kAdaptedLinears)
    if (has_adapter(c, linear)) per_block += c.lora.rank * (adapted_linear_in(c, linear) + adapted_linear_out(c, linear));
  return c.n_layer * per_block;
}

}  // namespace zb
