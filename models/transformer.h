// Transformer: forward and backward of a decoder-only network as calls into a Backend.
// It owns only its activations; parameters and gradients are views bound by the caller (the engine owns
// the flat buffers, because ZeRO decides where they live).
#pragma once

#include "core/tracking_allocator.h"
#include "kernels/backend.h"
#include "kernels/dropout_mask.h"
#include "models/activations.h"
#include "models/model_tensors.h"
#include "models/parameter_layout.h"
#include "models/unit_access.h"

namespace zb {

class Transformer {
 public:
  // Sized for micro-batches of batch x seq tokens in `dtype` on the backend's device, keeping the activations
  // `checkpointing` says (see activation_checkpointing.h).
  Transformer(const ParameterLayout& layout, Backend& backend, TrackingAllocator& allocator, DType dtype, int64_t batch,
              int64_t seq, ActivationCheckpointing checkpointing = ActivationCheckpointing::none);
  Transformer(const Transformer&) = delete;  // holds views into its own buffers and a backend reference
  Transformer& operator=(const Transformer&) = delete;

  void bind_parameters(ModelTensors parameters) { params_ = std::move(parameters); }
  void bind_gradients(ModelTensors gradients) { grads_ = std::move(gradients); }
  void bind_unit_parameters(size_t unit, const Tensor& flat) { bind_unit(layout_, unit, flat, params_); }
  void bind_unit_gradients(size_t unit, const Tensor& flat) { bind_unit(layout_, unit, flat, grads_); }
  // LoRA dropout's draw for the passes that follow: the masks are a function of (seed, pass, layer, layer's
  // adapter), the same in a pass's forward, its recompute and its backward. The trainer gives each micro-batch
  // its own pass number.
  void set_dropout_draw(uint64_t seed, uint64_t pass) { dropout_seed_ = seed, dropout_pass_ = pass; }
  // Told which units each pass is about to use (see unit_access.h); none by default.
  void set_unit_access(UnitAccess* access) { access_ = access; }

  // Mean cross-entropy over the batch's tokens. tokens and targets: int32 [batch * seq] on the device.
  double forward(const Tensor& tokens, const Tensor& targets);
  // Forward, then backward: adds loss_scale * d(mean loss)/d(parameter) to every bound gradient (or writes it,
  // for the units whose owner says so: see UnitAccess::backward_needs).
  // Returns the mean loss, waiting for the device.
  double forward_backward(const Tensor& tokens, const Tensor& targets, float loss_scale = 1.0f);
  // Its two halves queued on the backend without waiting: the forward with the loss and the logits' gradient
  // (losses() holds the per-token losses once the device is past it), and the backward from there.
  void queue_forward_and_loss(const Tensor& tokens, const Tensor& targets, float loss_scale);
  void queue_backward(const Tensor& tokens) { backward_from_logit_gradients(tokens); }
  const Tensor& losses() const { return acts_.losses; }

  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }
  ActivationCheckpointing checkpointing() const { return checkpointing_; }
  const Activations& activations() const { return acts_; }

 private:
  void forward_to_logits(const Tensor& tokens);
  void backward_from_logit_gradients(const Tensor& tokens);
  // Block l's forward from its first norm's output (in layers[l].ln1) to the MLP's activation: everything but
  // the MLP's output projection (and its post-norm) and the residual add after it.
  void block_forward_to_activation(int64_t l);
  // Block l's attention input from its projection: the q/k norms (from qkv_raw into qkv) and the rotary
  // embedding (in place), where the model has them.
  void attention_input_forward(int64_t l);
  // Its part from the attention's input (layers[l].qkv) to the second norm: the attention, its output projection
  // (and its post-norm) and the residual add fused into the norm.
  void attention_to_second_norm(int64_t l);
  // Block l's MLP output projection into the branch that the residual add reads: through mlp_out and its post-norm
  // where the model has post-norms.
  void mlp_output_forward(int64_t l);
  // A post-norm: branch = rmsnorm(x) with the weight's gain, saving its statistics in rstd.
  void post_norm_forward(const Tensor& x, const Tensor& weight, Tensor& rstd);
  // Its backward from d_residual into d_branch (written), adding the weight's gradient as `write` says.
  void post_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dweight, GradWrite write);
  // Before block l's backward: what the checkpointing mode did not keep of block l's activations, computed
  // again as the forward computed it.
  void recompute_block(int64_t l);
  void norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, NormOutputs& out);
  // residual_out = a + branch, and out = norm(residual_out), in one fused op.
  void residual_norm_forward(const Tensor& a, const Tensor& branch, Tensor& residual_out, const Tensor& weight,
                             const Tensor& bias, NormOutputs& out);
  void norm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const NormOutputs& saved, Tensor& dx,
                     Tensor& dweight, Tensor& dbias, GradWrite write);
  // Block l's fc = ln2.out W_fc^T + b_fc (with its adapter's term) and activated = act(fc).
  void mlp_input_forward(int64_t l);
  // activated = act(fc).
  void activation_forward(LayerActivations& a);
  // Block l's backward from dout (the MLP branch's output gradient) through the MLP's output projection and its
  // activation to d_fc; adds the projection's weight and bias gradients (or writes them, as `write` says) and its
  // adapter's (as `adapter_write` says).
  void mlp_output_backward(int64_t l, const Tensor& dout, GradWrite write, GradWrite adapter_write);
  // Block l's linear layer `linear`: out = x W^T + b, plus its LoRA adapter's s (x A^T) B^T where it has one
  // (saving s x A^T for the backward).
  void linear_forward(int64_t l, AdaptedLinear linear, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      Tensor& out);
  void add_adapter_forward(int64_t l, AdaptedLinear linear, const Tensor& x, Tensor& out);
  // Its backward: writes dx, stores the weight's and bias's gradients as `write` says (none where their views are
  // empty: frozen) and the adapter's as `adapter_write` says, adding the adapter's share to dx.
  void linear_backward(int64_t l, AdaptedLinear linear, const Tensor& dout, const Tensor& x, const Tensor& weight,
                       Tensor& dx, Tensor& dweight, Tensor& dbias, GradWrite write, GradWrite adapter_write);
  void adapter_backward(int64_t l, AdaptedLinear linear, const Tensor& dout, const Tensor& x, Tensor& dx,
                        GradWrite write);
  // forward_needs / forward_done of block l's unit and, under LoRA, its adapters' unit.
  // "block.L forward" / "block.L backward": a block's slice in a trace (and its NVTX range).
  std::string unit_pass_name(int64_t l, const char* pass) const;
  const std::string& unit_name(size_t u) const;
  void forward_needs_block(int64_t l);
  void forward_done_block(int64_t l);
  double mean_loss();

  // The UnitAccess calls, which do nothing without an owner listening.
  void forward_needs(size_t unit) { if (access_) access_->forward_needs(unit); }
  void forward_done(size_t unit) { if (access_) access_->forward_done(unit); }
  // How the unit's gradients are to be stored: added to, without an owner.
  GradWrite backward_needs(size_t unit, bool reads_weights = true) {
    return access_ ? access_->backward_needs(unit, reads_weights) : GradWrite::add;
  }
  void backward_done(size_t unit) { if (access_) access_->backward_done(unit); }

  const ParameterLayout& layout_;
  const TransformerConfig config_;
  Backend& backend_;
  int64_t batch_, seq_;
  ActivationCheckpointing checkpointing_;
  double lora_scale_;  // alpha / rank (0 without LoRA)
  uint64_t dropout_seed_ = 0, dropout_pass_ = 0;
  // Block l's adapter on `linear` masks its input x (when the configuration has dropout) into the dropout
  // scratch, and returns that, or x itself. The products that read it take input_scale(): s / (1 - p), dropout's
  // scale folded into the GEMM (the mask itself is exact).
  const Tensor& adapter_input(int64_t l, AdaptedLinear linear, const Tensor& x);
  double input_scale() const { return lora_scale_ / (1.0 - config_.lora.dropout); }
  uint64_t dropout_stream(int64_t l, AdaptedLinear linear) const {
    static_assert(kAdaptedLinears.size() <= 4, "an adapter's index takes two bits of the stream");
    return kDropoutStreams | (dropout_pass_ << 16) | (uint64_t(l) << 2) | uint64_t(linear);
  }
  Tensor dropped_;  // adapter_input's view of the scratch
  // Layer l's attention: the model's heads, with the layer's sliding window (if any) and the model's scale.
  AttentionShape attention_shape(int64_t l) const;
  // The rotary frequencies layer l rotates by.
  const Tensor& inv_freq(int64_t l) const { return config_.local_rope_layer(l) ? local_inv_freq_ : inv_freq_; }
  float gain_offset() const { return float(config_.norm_gain_offset); }
  Activations acts_;
  std::vector<Buffer> constants_;
  Tensor positions_;        // int32 [batch * seq]: t + position_offset for learned positions
  Tensor inv_freq_;         // rotary inverse frequencies [head_dim / 2]
  Tensor local_inv_freq_;   // those of the sliding-window layers where they have a base of their own
  double embedding_scale_;  // what the embedding rows are multiplied by (1: not scaled)
  ModelTensors params_, grads_;
  UnitAccess* access_ = nullptr;
};

}  // namespace zb
