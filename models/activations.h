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
  Tensor qkv;        // after rotary embedding, when the model uses it
  Tensor attention;  // [N, heads * head_dim]
  Tensor lse;        // [batch, heads, seq]
  Tensor mid;        // residual stream after the attention branch
  NormOutputs ln2;
  Tensor fc;         // MLP input projection (both SwiGLU halves)
  Tensor activated;  // [N, d_ff]
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

  // Backward scratch.
  Tensor d_residual, d_norm, d_attention, d_qkv, d_fc, d_activated;
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
