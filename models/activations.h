// The activations one forward pass saves for its backward pass, and the backward pass's scratch buffers,
// sized for one micro-batch. Everything is allocated once, in the allocator's activations pool. With
// activation checkpointing (see activation_checkpointing.h), the tensors a mode recomputes are views of one
// set of buffers that every layer shares: layers[l] names them all the same, and they hold one layer's
// values at a time.
#pragma once

#include <array>
#include <vector>

#include "core/tracking_allocator.h"
#include "models/activation_checkpointing.h"
#include "models/transformer_config.h"

namespace zb {

// A normalisation's output and saved statistics (mean is unused by RMSNorm).
struct NormOutputs {
  Tensor out, mean, rstd;
};

struct LayerActivations {
  NormOutputs ln1;
  Tensor qkv_raw;    // models with q/k norms: the projection's output (qkv is after the norms)
  Tensor qkv;        // the attention's input: after the q/k norms and the rotary embedding, where the model has them
  Tensor qk_rstd;    // models with q/k norms: [N, heads + kv_heads], the norms' statistics (computed with qkv)
  Tensor attention;  // [N, heads * head_dim]
  Tensor lse;        // [batch, heads, seq]
  // Models with post-norms: the attention's output projection before its norm, and that norm's statistics [N].
  Tensor attn_out, attn_out_rstd;
  Tensor mid;        // residual stream after the attention branch
  NormOutputs ln2;
  Tensor fc;         // MLP input projection (both halves of a gated MLP)
  Tensor activated;  // [N, d_ff]
  // Models with post-norms: the MLP's output projection before its norm, and that norm's statistics [N].
  Tensor mlp_out, mlp_out_rstd;
  // LoRA: s x A^T [N, rank] of each adapted linear layer (indexed by AdaptedLinear; empty where none), kept
  // for the adapter's backward in every checkpointing mode (a recompute writes the same values again).
  std::array<Tensor, kAdaptedLinears.size()> lora_inner;
};

class Activations {
 public:
  Activations(const TransformerConfig& config, TrackingAllocator& allocator, DType dtype, int64_t batch, int64_t seq,
              ActivationCheckpointing checkpointing = ActivationCheckpointing::none);
  // The bytes these buffers take for one micro-batch, counted by building them against a memory that hands
  // out addresses and touches nothing: the prediction that reports set beside the measured pool.
  static size_t planned_bytes(const TransformerConfig& config, DType dtype, int64_t batch, int64_t seq,
                              ActivationCheckpointing checkpointing = ActivationCheckpointing::none);

  std::vector<Tensor> residual;  // residual[l]: input of layer l; residual[n_layer]: output of the last layer
  std::vector<LayerActivations> layers;
  NormOutputs ln_f;
  Tensor logits;  // [N, padded_vocab]; overwritten by its gradient during backward
  Tensor losses;  // [N]
  Tensor branch;  // [N, C]: a residual branch's output before it is added

  // Backward scratch. With q/k norms, d_qkv_raw is the projection's output gradient (d_qkv the attention input's);
  // with post-norms, d_branch a branch's output gradient before its norm.
  Tensor d_residual, d_norm, d_attention, d_qkv, d_fc, d_activated, d_qkv_raw, d_branch;
  // LoRA: an adapter's inner gradient [N, rank]; and where the frozen norms' weight (and bias) gradients go,
  // unread: the backends compute them in the same pass as the input's gradient.
  Tensor d_lora_inner, frozen_norm_weight_grad, frozen_norm_bias_grad;
  // LoRA dropout: an adapter's masked input, then in its backward its input's gradient before the mask,
  // [N, widest input] (an adapted layer views its [N, in] at the start).
  Tensor lora_dropped;

 private:
  Tensor make(Shape shape, DType dtype);
  TrackingAllocator& allocator_;
  std::vector<Buffer> buffers_;
};

}  // namespace zb
