#include "models/model_tensors.h"

#include "core/check.h"
#include "core/strings.h"

namespace zb {

namespace {

Tensor view_of(const ParameterUnit& unit, const Tensor& buffer, const std::string& name) {
  if (buffer.empty() || !unit.has(name)) return {};
  const ParameterTensor& t = unit.tensor(name);
  return buffer.flat_slice(t.offset, t.offset + t.numel()).reshaped(t.shape);
}

}  // namespace

void bind_unit(const ParameterLayout& layout, size_t unit, const Tensor& buffer, ModelTensors& m) {
  const ParameterUnit& u = layout.unit(unit);
  ZB_CHECK(buffer.empty() || buffer.numel() >= u.numel, "unit ", u.name, " buffer too small");
  const bool tied = layout.config().tied_embeddings;
  if (unit == layout.embedding_unit()) {
    m.wte = view_of(u, buffer, "wte");
    m.wpe = view_of(u, buffer, "wpe");
    if (tied) m.lm_head = m.wte;
  } else if (unit == layout.final_unit()) {
    m.ln_f_weight = view_of(u, buffer, "ln_f.weight");
    m.ln_f_bias = view_of(u, buffer, "ln_f.bias");
    if (!tied) m.lm_head = view_of(u, buffer, "lm_head");
  } else if (layout.is_adapter_unit(unit)) {
    BlockTensors& b = m.blocks.at(size_t(layout.layer_of(unit)));
    for (AdaptedLinear linear : kAdaptedLinears) {
      const std::string_view name = adapted_linear_name(linear);
      b.lora(linear) = {view_of(u, buffer, cat(name, ".lora_a")), view_of(u, buffer, cat(name, ".lora_b"))};
    }
  } else {
    const Tensor& buf = buffer;
    BlockTensors& b = m.blocks.at(size_t(layout.layer_of(unit)));
    b.ln1_weight = view_of(u, buf, "ln1.weight"), b.ln1_bias = view_of(u, buf, "ln1.bias");
    b.qkv_weight = view_of(u, buf, "attn.qkv.weight"), b.qkv_bias = view_of(u, buf, "attn.qkv.bias");
    b.q_norm_weight = view_of(u, buf, "attn.q_norm.weight"), b.k_norm_weight = view_of(u, buf, "attn.k_norm.weight");
    b.attn_proj_weight = view_of(u, buf, "attn.proj.weight"), b.attn_proj_bias = view_of(u, buf, "attn.proj.bias");
    b.attn_post_norm_weight = view_of(u, buf, "attn.post_norm.weight");
    b.ln2_weight = view_of(u, buf, "ln2.weight"), b.ln2_bias = view_of(u, buf, "ln2.bias");
    b.fc_weight = view_of(u, buf, "mlp.fc.weight"), b.fc_bias = view_of(u, buf, "mlp.fc.bias");
    b.mlp_proj_weight = view_of(u, buf, "mlp.proj.weight"), b.mlp_proj_bias = view_of(u, buf, "mlp.proj.bias");
    b.mlp_post_norm_weight = view_of(u, buf, "mlp.post_norm.weight");
  }
}

const LoraPair& BlockTensors::lora(AdaptedLinear linear) const {
  switch (linear) {
    case AdaptedLinear::qkv: return qkv_lora;
    case AdaptedLinear::attn_proj: return attn_proj_lora;
    case AdaptedLinear::fc: return fc_lora;
    case AdaptedLinear::mlp_proj: return mlp_proj_lora;
  }
  return qkv_lora;
}

ModelTensors bind_model_tensors(const ParameterLayout& layout, const std::vector<Tensor>& unit_buffers) {
  ZB_CHECK(unit_buffers.size() == layout.units().size(), "one buffer per unit: ", unit_buffers.size(), " for ",
           layout.units().size());
  ModelTensors m;
  m.blocks.resize(size_t(layout.config().n_layer));
  for (size_t u = 0; u < unit_buffers.size(); ++u) bind_unit(layout, u, unit_buffers[u], m);
  return m;
}

}  // namespace zb
