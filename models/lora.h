// LoRA (Hu et al. 2021): low-rank adapters beside a frozen model. A linear layer y = x W^T + b becomes
// y = x W^T + b + s (x A^T) B^T with A [rank, in] and B [out, rank] trained, W and b frozen, s = alpha / rank.
// A starts random and B zero, so that the adapted model starts as the base model.
//
// Which layers: `attention` adapts the fused query/key/value projection (one A shared by q, k and v, one B
// of their joint width: q, k and v are one GEMM here) and the attention's output projection; `mlp` the MLP's
// input projection (both SwiGLU halves, fused) and output projection; `all` both.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace zb {

struct TransformerConfig;

enum class LoraTargets { attention, mlp, all };

LoraTargets parse_lora_targets(std::string_view name);  // throws Error naming the accepted values
std::string_view lora_targets_name(LoraTargets targets);

struct LoraConfig {
  int64_t rank = 0;    // 0: no adapters, every weight trained
  double alpha = 0;    // the scale s = alpha / rank
  LoraTargets targets = LoraTargets::attention;
  // Dropout on the adapters' input (x above, not the frozen layer's), in [0, 1): a new mask each pass.
  double dropout = 0.0;

  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / double(rank); }
};

// The linear layers of a block that can carry an adapter, in the order the forward runs them.
enum class AdaptedLinear { qkv, attn_proj, fc, mlp_proj };
constexpr std::array<AdaptedLinear, 4> kAdaptedLinears{AdaptedLinear::qkv, AdaptedLinear::attn_proj, AdaptedLinear::fc,
                                                       AdaptedLinear::mlp_proj};

// The base weight's name in a block unit ("attn.qkv", ...), and its input and output widths.
std::string_view adapted_linear_name(AdaptedLinear linear);
int64_t adapted_linear_in(const TransformerConfig& config, AdaptedLinear linear);
int64_t adapted_linear_out(const TransformerConfig& config, AdaptedLinear linear);
// Whether the configuration puts an adapter on that layer (false without LoRA).
bool has_adapter(const TransformerConfig& config, AdaptedLinear linear);

// "none", or "rank 16, alpha 32, attention" (", dropout 0.05" where there is one): how records and logs name the
// adapters.
std::string lora_description(const LoraConfig& lora);

// The adapters' parameters (A and B of every adapted layer of every block); 0 without LoRA.
int64_t lora_parameter_count(const TransformerConfig& config);

}  // namespace zb
