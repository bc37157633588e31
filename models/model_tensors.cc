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

void bind_unit(const ParameterLayout& layout, size_t unit, const Tensor& buffer, ModelTensors& m) {
  const ParameterUnit& u = layout.unit(unit);
  ZB_CHECK(buffer.numel() >= u.numel, "unit ", u.name, " buffer too small");
  const bool tied = layout.config().tied_embeddings;
  if (unit == layout.embedding_unit()) {
    m.wte = view_of(u, buffer, "wte");
    m.wpe = view_of(u, buffer, "wpe");
    if (tied) m.lm_head = m.wte;
  } else if (unit == layout.final_unit()) {
    m.ln_f_weight = view_of(u, buffer, "ln_f.weight");
    m.ln_f_bias = view_of(u, buffer, "ln_f.bias");
    if (!tied) m.lm_head = view_of(u, buffer, "lm_head");
  } else {
    const Tensor& buf = buffer;
    m.blocks.at(unit - layout.block_unit(0)) = {
        view_of(u, buf, "ln1.weight"),      view_of(u, buf, "ln1.bias"),      view_of(u, buf, "attn.qkv.weight"),
        view_of(u, buf, "attn.qkv.bias"),   view_of(u, buf, "attn.proj.weight"), view_of(u, buf, "attn.proj.bias"),
        view_of(u, buf, "ln2.weight"),      view_of(u, buf, "ln2.bias"),      view_of(u, buf, "mlp.fc.weight"),
        view_of(u, buf, "mlp.fc.bias"),     view_of(u, buf, "mlp.proj.weight"), view_of(u, buf, "mlp.proj.bias")};
  }
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
