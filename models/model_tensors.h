// ModelTensors: named views of every weight (or every gradient) of a model inside its per-unit flat
// buffers. The same binding serves parameters and gradients, since both share the ParameterLayout.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "models/parameter_layout.h"

namespace zb {

// Absent tensors (biases of bias-free models, the LayerNorm bias under RMSNorm) are empty views.
struct BlockTensors {
  Tensor ln1_weight, ln1_bias;
  Tensor qkv_weight, qkv_bias;
  Tensor attn_proj_weight, attn_proj_bias;
  Tensor ln2_weight, ln2_bias;
  Tensor fc_weight, fc_bias;
  Tensor mlp_proj_weight, mlp_proj_bias;
};

struct ModelTensors {
  Tensor wte, wpe;
  std::vector<BlockTensors> blocks;
  Tensor ln_f_weight, ln_f_bias;
  Tensor lm_head;  // a view of wte when the embeddings are tied
};

// unit_buffers[u] is unit u's flat buffer (1-D, any dtype, at least layout.unit(u).numel elements).
ModelTensors bind_model_tensors(const ParameterLayout& layout, const std::vector<Tensor>& unit_buffers);
// Points unit u's views of m (m.blocks already sized) into `buffer`; the tied lm head follows the embeddings.
void bind_unit(const ParameterLayout& layout, size_t unit, const Tensor& buffer, ModelTensors& m);

}  // namespace zb
