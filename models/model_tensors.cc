#include "models/model_tensors.h"

#include "core/check.h"

namespace zb {

namespace {

Tensor view_of(const ParameterUnit& unit, const Tensor& buffer, const std::string& name) {
  if (!unit.has(name)) return {};
  const ParameterTensor& t = unit.tensor(name);
  return buffer.flat_slice(t.offset, t.offset + t.numel()).reshaped(t.shape);
}

}  // namespace

ModelTensors bind_model_tensors(const ParameterLayout& layout, const std::vector<Tensor>& unit_buffers) {
  ZB_CHECK(unit_buffers.size() == layout.units().size(), "one buffer per unit: ", unit_buffers.size(), " for ",
           layout.units().size());
  for (size_t u = 0; u < unit_buffers.size(); ++u)
    ZB_CHECK(unit_buffers[u].numel() >= layout.unit(u).numel, "unit ", layout.unit(u).name, " buffer too small");

  ModelTensors m;
  const auto& emb = layout.unit(layout.embedding_unit());
  const Tensor& emb_buf = unit_buffers[layout.embedding_unit()];
  m.wte = view_of(emb, emb_buf, "wte");
  m.wpe = view_of(emb, emb_buf, "wpe");
  for (int64_t l = 0; l < layout.config().n_layer; ++l) {
    const auto& u = layout.unit(layout.block_unit(l));
    const Tensor& buf = unit_buffers[layout.block_unit(l)];
    m.blocks.push_back({view_of(u, buf, "ln1.weight"), view_of(u, buf, "ln1.bias"), view_of(u, buf, "attn.qkv.weight"),
                        view_of(u, buf, "attn.qkv.bias"), view_of(u, buf, "attn.proj.weight"),
                        view_of(u, buf, "attn.proj.bias"), view_of(u, buf, "ln2.weight"), view_of(u, buf, "ln2.bias"),
                        view_of(u, buf, "mlp.fc.weight"), view_of(u, buf, "mlp.fc.bias"),
                        view_of(u, buf, "mlp.proj.weight"), view_of(u, buf, "mlp.proj.bias")});
  }
  const auto& fin = layout.unit(layout.final_unit());
  const Tensor& fin_buf = unit_buffers[layout.final_unit()];
  m.ln_f_weight = view_of(fin, fin_buf, "ln_f.weight");
  m.ln_f_bias = view_of(fin, fin_buf, "ln_f.bias");
  m.lm_head = layout.config().tied_embeddings ? m.wte : view_of(fin, fin_buf, "lm_head");
  return m;
}

}  // namespace zb
