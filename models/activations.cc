#include "models/activations.h"

#include <algorithm>
#include <memory>

#include "kernels/backend.h"

namespace zb {

Activations::Activations(const TransformerConfig& c, TrackingAllocator& allocator, DType dtype, int64_t batch,
                         int64_t seq, ActivationCheckpointing checkpointing)
    : allocator_(allocator) {
  const int64_t n = batch * seq;
  const DType stats = stats_dtype(dtype);
  auto norm_outputs = [&] {
    return NormOutputs{make(Shape{n, c.d_model}, dtype), make(Shape{n}, stats), make(Shape{n}, stats)};
  };
  // Which of a layer's tensors the mode recomputes (the softmax statistics go with the attention output: the
  // attention's forward writes both; a norm's statistics with its input or output the same way). Selective keeps
  // the GEMM outputs the backward reads but the attention's output projection: q/k/v as projected (with q/k norms,
  // their normed and rotated copy is recomputed from it), the MLP's input and, with post-norms, output projection.
  struct Parts {
    bool ln1 = false, qkv_raw = false, qkv = false, attention = false, attn_out = false, mid = false, ln2 = false,
         fc = false, activated = false, mlp_out = false;
  };
  const Parts recomputed = checkpointing == ActivationCheckpointing::full
                               ? Parts{true, true, true, true, true, true, true, true, true, true}
                           : checkpointing == ActivationCheckpointing::selective
                               ? Parts{.ln1 = true,
                                       .qkv = c.qk_norm,
                                       .attention = true,
                                       .attn_out = true,
                                       .mid = true,
                                       .ln2 = true,
                                       .activated = true}
                               : Parts{};
  // A layer's tensors: those in `mine` allocated for it, the others taken from `from`.
  auto layer = [&](const Parts& mine, const LayerActivations& from) {
    LayerActivations a = from;
    if (mine.ln1) a.ln1 = norm_outputs();
    if (mine.qkv_raw && c.qk_norm) a.qkv_raw = make(Shape{n, c.qkv_width()}, dtype);
    if (mine.qkv) {
      a.qkv = make(Shape{n, c.qkv_width()}, dtype);
      if (c.qk_norm) a.qk_rstd = make(Shape{n, c.n_head + c.n_kv_head}, stats);
    }
    if (mine.attention) {
      a.attention = make(Shape{n, c.attention_width()}, dtype);
      a.lse = make(Shape{batch, c.n_head, seq}, stats);
    }
    if (mine.attn_out && c.post_norms) {
      a.attn_out = make(Shape{n, c.d_model}, dtype);
      a.attn_out_rstd = make(Shape{n}, stats);
    }
    if (mine.mid) a.mid = make(Shape{n, c.d_model}, dtype);
    if (mine.ln2) a.ln2 = norm_outputs();
    if (mine.fc) a.fc = make(Shape{n, c.mlp_in_width()}, dtype);
    if (mine.activated) a.activated = make(Shape{n, c.d_ff}, dtype);
    if (mine.mlp_out && c.post_norms) {
      a.mlp_out = make(Shape{n, c.d_model}, dtype);
      a.mlp_out_rstd = make(Shape{n}, stats);
    }
    return a;
  };
  const Parts kept{!recomputed.ln1,      !recomputed.qkv_raw, !recomputed.qkv, !recomputed.attention,
                   !recomputed.attn_out, !recomputed.mid,     !recomputed.ln2, !recomputed.fc,
                   !recomputed.activated, !recomputed.mlp_out};

  for (int64_t l = 0; l <= c.n_layer; ++l) residual.push_back(make(Shape{n, c.d_model}, dtype));
  const LayerActivations shared = layer(recomputed, {});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    layers.push_back(layer(kept, shared));
    for (AdaptedLinear linear : kAdaptedLinears)
      if (has_adapter(c, linear)) layers.back().lora_inner[size_t(linear)] = make(Shape{n, c.lora.rank}, dtype);
  }
  ln_f = norm_outputs();
  logits = make(Shape{n, c.padded_vocab()}, dtype);
  losses = make(Shape{n}, stats);
  branch = make(Shape{n, c.d_model}, dtype);

  d_residual = make(Shape{n, c.d_model}, dtype);
  d_norm = make(Shape{n, c.d_model}, dtype);
  d_attention = make(Shape{n, c.attention_width()}, dtype);
  d_qkv = make(Shape{n, c.qkv_width()}, dtype);
  if (c.qk_norm) d_qkv_raw = make(Shape{n, c.qkv_width()}, dtype);
  if (c.post_norms) d_branch = make(Shape{n, c.d_model}, dtype);
  d_fc = make(Shape{n, c.mlp_in_width()}, dtype);
  // A GELU MLP's backward goes from d_residual straight to d_fc (Backend::matmul_gelu_backward), unless an
  // adapter on the output projection adds to the activation's gradient first.
  if (c.mlp != MlpKind::gelu || has_adapter(c, AdaptedLinear::mlp_proj)) d_activated = make(Shape{n, c.d_ff}, dtype);
  if (c.lora.enabled()) {
    d_lora_inner = make(Shape{n, c.lora.rank}, dtype);
    if (c.lora.dropout > 0) {
      int64_t widest = 0;
      for (AdaptedLinear linear : kAdaptedLinears)
        if (has_adapter(c, linear)) widest = std::max(widest, adapted_linear_in(c, linear));
      lora_dropped = make(Shape{n * widest}, dtype);
    }
    frozen_norm_weight_grad = make(Shape{c.d_model}, dtype);
    if (c.norm == NormKind::layernorm) frozen_norm_bias_grad = make(Shape{c.d_model}, dtype);
  }
}

size_t Activations::planned_bytes(const TransformerConfig& config, DType dtype, int64_t batch, int64_t seq,
                                  ActivationCheckpointing checkpointing) {
  TrackingAllocator counting(std::make_unique<CountingMemory>());
  const Activations plan(config, counting, dtype, batch, seq, checkpointing);
  return counting.usage(MemoryPool::activations).current;
}

Tensor Activations::make(Shape shape, DType dtype) {
  buffers_.push_back(allocator_.allocate(shape, dtype, MemoryPool::activations));
  return buffers_.back().view(shape, dtype);
}

}  // namespace zb
