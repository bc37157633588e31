// ModelTensors: named views of every weight (or every gradient) of a model inside its per-unit flat
// buffers. The same binding serves parameters and gradients, since both share the ParameterLayout.
#pragma once

#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/lora.h"
#include "models/parameter_layout.h"

namespace zb {

// A linear layer's LoRA adapter (models/lora.h): a [rank, in] and b [out, rank]; empty where it has none.
struct LoraPair {
  Tensor a, b;
  bool empty() const { return a.empty(); }
};

// Absent tensors (biases of bias-free models, the LayerNorm bias under RMSNorm, adapters not configured, the
// gradients of frozen units) are empty views.
struct BlockTensors {
  Tensor ln1_weight, ln1_bias;
  Tensor qkv_weight, qkv_bias;
  Tensor q_norm_weight, k_norm_weight;  // models with q/k norms: [head_dim] each
  Tensor attn_proj_weight, attn_proj_bias;
  Tensor attn_post_norm_weight;  // models with post-norms
  Tensor ln2_weight, ln2_bias;
  Tensor fc_weight, fc_bias;
  Tensor mlp_proj_weight, mlp_proj_bias;
  Tensor mlp_post_norm_weight;
  // The adapters, bound from the block's adapter unit.
  LoraPair qkv_lora, attn_proj_lora, fc_lora, mlp_proj_lora;
  const LoraPair& lora(AdaptedLinear linear) const;
  LoraPair& lora(AdaptedLinear linear) { return const_cast<LoraPair&>(std::as_const(*this).lora(linear)); }
};

struct ModelTensors {
  Tensor wte, wpe;
  std::vector<BlockTensors> blocks;
  Tensor ln_f_weight, ln_f_bias;
  Tensor lm_head;  // a view of wte when the embeddings are tied
};

// unit_buffers[u] is unit u's flat buffer (1-D, any dtype, at least layout.unit(u).numel elements).
ModelTensors bind_model_tensors(const ParameterLayout& layout, const std::vector<Tensor>& unit_buffers);
// Points unit u's views of m (m.blocks already sized) into `buffer` (empty views where it is empty: a frozen unit's
// gradients); the tied lm head follows the embeddings.
void bind_unit(const ParameterLayout& layout, size_t unit, const Tensor& buffer, ModelTensors& m);

}  // namespace zb
