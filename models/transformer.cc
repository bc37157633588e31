#include "models/transformer.h"

#include <cmath>
#include <optional>
#include <vector>

#include "core/bf16.h"
#include "core/f16.h"
#include "core/trace.h"
#include "models/rope_frequencies.h"

namespace zb {

namespace {

// Copies host values into a new device buffer of the given dtype.
template <typename T>
Buffer upload(Backend& backend, TrackingAllocator& allocator, const std::vector<T>& values, Tensor& view) {
  Buffer buffer = allocator.allocate(Shape{int64_t(values.size())}, DTypeOf<T>::value, MemoryPool::workspace);
  view = buffer.view(Shape{int64_t(values.size())}, DTypeOf<T>::value);
  Tensor host(const_cast<T*>(values.data()), view.shape, view.dtype, Device::cpu());
  backend.copy(host, view);
  return buffer;
}

// Gemma's embedding scale sqrt(d_model) as Hugging Face applies it: a float32 scalar converted to the weights'
// dtype before the product (34 in bf16 for a width of 1152, not 33.94). 1 for the models without one.
double embedding_scale(const TransformerConfig& c, DType dtype) {
  if (!c.scale_embeddings) return 1.0;
  const float scale = float(std::sqrt(double(c.d_model)));
  if (dtype == DType::bf16) return round_to_bf16(scale);
  if (dtype == DType::f16) return round_to_f16(scale);
  return scale;
}

}  // namespace

Transformer::Transformer(const ParameterLayout& layout, Backend& backend, TrackingAllocator& allocator, DType dtype,
                         int64_t batch, int64_t seq, ActivationCheckpointing checkpointing)
    : layout_(layout),
      config_(layout.config()),
      backend_(backend),
      batch_(batch),
      seq_(seq),
      checkpointing_(checkpointing),
      lora_scale_(config_.lora.enabled() ? config_.lora.scale() : 0.0),
      acts_(config_, allocator, dtype, batch, seq, checkpointing),
      embedding_scale_(embedding_scale(config_, dtype)) {
  const std::string problem = sequence_length_problem(config_, seq);
  ZB_CHECK(problem.empty(), "sequence length ", problem);
  params_.blocks.resize(size_t(config_.n_layer));  // for bind_unit_*; bind_* replace them whole
  grads_.blocks.resize(size_t(config_.n_layer));
  if (config_.has_learned_positions()) {
    std::vector<int32_t> positions(batch * seq);
    for (int64_t i = 0; i < batch * seq; ++i) positions[i] = int32_t(i % seq + config_.position_offset);
    constants_.push_back(upload(backend, allocator, positions, positions_));
  } else {
    auto upload_frequencies = [&](bool local, Tensor& view) {
      const std::vector<double> inv_freq = rope_inverse_frequencies(config_, local);
      if (stats_dtype(dtype) == DType::f64) {
        constants_.push_back(upload(backend, allocator, inv_freq, view));
      } else {
        constants_.push_back(upload(backend, allocator, std::vector<float>(inv_freq.begin(), inv_freq.end()), view));
      }
    };
    upload_frequencies(false, inv_freq_);
    bool any_local = false;
    for (int64_t l = 0; l < config_.n_layer; ++l) any_local = any_local || config_.local_rope_layer(l);
    if (any_local) upload_frequencies(true, local_inv_freq_);
  }
}

AttentionShape Transformer::attention_shape(int64_t l) const {
  AttentionShape s{batch_, seq_, config_.n_head, config_.n_kv_head, config_.head_dim, config_.layer_window(l)};
  s.softmax_scale = config_.attention_softmax_scale();
  return s;
}

double Transformer::forward(const Tensor& tokens, const Tensor& targets) {
  forward_to_logits(tokens);
  backend_.cross_entropy_forward(acts_.logits, targets, config_.vocab_size, acts_.losses);
  return mean_loss();
}

double Transformer::forward_backward(const Tensor& tokens, const Tensor& targets, float loss_scale) {
  queue_forward_and_loss(tokens, targets, loss_scale);
  queue_backward(tokens);
  return mean_loss();
}

void Transformer::queue_forward_and_loss(const Tensor& tokens, const Tensor& targets, float loss_scale) {
  forward_to_logits(tokens);
  TraceScope unit(TraceCategory::unit, unit_name(layout_.final_unit()) + " forward");
  const float grad_scale = loss_scale / float(batch_ * seq_);
  backend_.cross_entropy_forward_backward(acts_.logits, targets, config_.vocab_size, grad_scale, acts_.losses);
}

void Transformer::forward_to_logits(const Tensor& tokens) {
  Backend& b = backend_;
  const size_t embeddings = layout_.embedding_unit(), final = layout_.final_unit();
  const bool tied = config_.tied_embeddings;
  std::optional<TraceScope> outer_unit(std::in_place, TraceCategory::unit, unit_name(embeddings) + " forward");
  forward_needs(embeddings);
  b.embedding_forward(tokens, params_.wte, acts_.residual[0], /*accumulate=*/false);
  if (config_.has_learned_positions()) b.embedding_forward(positions_, params_.wpe, acts_.residual[0], true);
  if (config_.scale_embeddings) b.scale(acts_.residual[0], embedding_scale_, acts_.residual[0]);
  if (!tied) forward_done(embeddings);
  // Each residual add is fused into the norm that reads its result: the attention branch's into the same
  // block's second norm, the MLP branch's into the next block's first norm (or the final norm). So block l + 1
  // begins, in effect, with the last op of block l's loop iteration, which also asks for (gathers) block l + 1's
  // weights: a trace shows them in block l's pass.
  outer_unit.emplace(TraceCategory::unit, unit_pass_name(0, "forward"));
  forward_needs_block(0);
  norm_forward(acts_.residual[0], params_.blocks[0].ln1_weight, params_.blocks[0].ln1_bias, acts_.layers[0].ln1);
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    if (l > 0) outer_unit.emplace(TraceCategory::unit, unit_pass_name(l, "forward"));
    LayerActivations& a = acts_.layers[l];
    block_forward_to_activation(l);
    mlp_output_forward(l);
    const bool last = l + 1 == config_.n_layer;
    if (last) {
      forward_needs(final);
    } else {
      forward_needs_block(l + 1);
    }
    // Bound after forward_needs: the next unit's views may just have been (re)bound.
    const Tensor& next_weight = last ? params_.ln_f_weight : params_.blocks[l + 1].ln1_weight;
    const Tensor& next_bias = last ? params_.ln_f_bias : params_.blocks[l + 1].ln1_bias;
    residual_norm_forward(a.mid, acts_.branch, acts_.residual[l + 1], next_weight, next_bias,
                          last ? acts_.ln_f : acts_.layers[l + 1].ln1);
    forward_done_block(l);
  }
  outer_unit.emplace(TraceCategory::unit, unit_name(final) + " forward");
  b.matmul_forward(acts_.ln_f.out, params_.lm_head, Tensor{}, acts_.logits);
  forward_done(final);
  if (tied) forward_done(embeddings);
}

void Transformer::block_forward_to_activation(int64_t l) {
  LayerActivations& a = acts_.layers[l];
  const BlockTensors& w = params_.blocks[l];
  linear_forward(l, AdaptedLinear::qkv, a.ln1.out, w.qkv_weight, w.qkv_bias, config_.qk_norm ? a.qkv_raw : a.qkv);
  attention_input_forward(l);
  attention_to_second_norm(l);
  mlp_input_forward(l);
}

void Transformer::attention_input_forward(int64_t l) {
  LayerActivations& a = acts_.layers[l];
  const BlockTensors& w = params_.blocks[l];
  const AttentionShape shape = attention_shape(l);
  if (config_.qk_norm) {
    backend_.qk_norm_forward(a.qkv_raw, w.q_norm_weight, w.k_norm_weight, float(config_.norm_eps), gain_offset(),
                             shape, a.qkv, a.qk_rstd);
  }
  if (!config_.has_learned_positions()) backend_.rope_forward(a.qkv, inv_freq(l), shape);
}

void Transformer::attention_to_second_norm(int64_t l) {
  LayerActivations& a = acts_.layers[l];
  const BlockTensors& w = params_.blocks[l];
  backend_.attention_forward(a.qkv, attention_shape(l), a.attention, a.lse);
  if (config_.post_norms) {
    linear_forward(l, AdaptedLinear::attn_proj, a.attention, w.attn_proj_weight, w.attn_proj_bias, a.attn_out);
    post_norm_forward(a.attn_out, w.attn_post_norm_weight, a.attn_out_rstd);
  } else {
    linear_forward(l, AdaptedLinear::attn_proj, a.attention, w.attn_proj_weight, w.attn_proj_bias, acts_.branch);
  }
  residual_norm_forward(acts_.residual[l], acts_.branch, a.mid, w.ln2_weight, w.ln2_bias, a.ln2);
}

void Transformer::mlp_output_forward(int64_t l) {
  LayerActivations& a = acts_.layers[l];
  const BlockTensors& w = params_.blocks[l];
  if (config_.post_norms) {
    linear_forward(l, AdaptedLinear::mlp_proj, a.activated, w.mlp_proj_weight, w.mlp_proj_bias, a.mlp_out);
    post_norm_forward(a.mlp_out, w.mlp_post_norm_weight, a.mlp_out_rstd);
  } else {
    linear_forward(l, AdaptedLinear::mlp_proj, a.activated, w.mlp_proj_weight, w.mlp_proj_bias, acts_.branch);
  }
}

void Transformer::post_norm_forward(const Tensor& x, const Tensor& weight, Tensor& rstd) {
  backend_.rmsnorm_forward(x, weight, float(config_.norm_eps), acts_.branch, rstd, gain_offset());
}

void Transformer::post_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dweight,
                                     GradWrite write) {
  backend_.fill_zero(acts_.d_branch);  // the norm's backward adds to its input's gradient
  Tensor no_bias;
  norm_backward(acts_.d_residual, x, weight, NormOutputs{{}, {}, rstd}, acts_.d_branch, dweight, no_bias, write);
}

// The first norm is recomputed unfused from the kept residual stream: the fused residual-and-norm kernel that
// computed it normalises the sum as it stores it (rounded to the dtype), so the result is the same bits. The last
// block's backward needs nothing recomputed: the shared buffers still hold its activations from the forward.
// Full recomputes the whole block but the final residual add; selective from the kept projections on (q/k/v as
// projected, the MLP's input projection and, with post-norms, its output projection).
void Transformer::recompute_block(int64_t l) {
  if (checkpointing_ == ActivationCheckpointing::none || l + 1 == config_.n_layer) return;
  LayerActivations& a = acts_.layers[l];
  const BlockTensors& w = params_.blocks[l];
  norm_forward(acts_.residual[l], w.ln1_weight, w.ln1_bias, a.ln1);
  if (checkpointing_ == ActivationCheckpointing::full) {
    block_forward_to_activation(l);
    if (config_.post_norms) mlp_output_forward(l);  // the MLP's post-norm reads its output projection's
    return;
  }
  if (config_.qk_norm) attention_input_forward(l);
  attention_to_second_norm(l);
  activation_forward(a);
}

void Transformer::backward_from_logit_gradients(const Tensor& tokens) {
  Backend& b = backend_;
  Tensor no_bias;
  const size_t embeddings = layout_.embedding_unit(), final = layout_.final_unit();
  const bool tied = config_.tied_embeddings;
  std::optional<TraceScope> outer_unit(std::in_place, TraceCategory::unit, unit_name(final) + " backward");
  const GradWrite final_write = backward_needs(final);
  // Tied, the lm head's gradient is the embedding unit's, written first here and added to by the lookup's
  // backward at the end.
  const GradWrite embeddings_write = tied ? backward_needs(embeddings) : GradWrite::add;
  b.matmul_backward(acts_.logits, acts_.ln_f.out, params_.lm_head, acts_.d_norm, grads_.lm_head, no_bias,
                    tied ? embeddings_write : final_write);
  // d_residual carries d(loss)/d(residual stream) down the network; each norm adds its branch's share.
  b.fill_zero(acts_.d_residual);
  norm_backward(acts_.d_norm, acts_.residual[config_.n_layer], params_.ln_f_weight, acts_.ln_f, acts_.d_residual,
                grads_.ln_f_weight, grads_.ln_f_bias, final_write);
  backward_done(final);
  outer_unit.reset();

  for (int64_t l = config_.n_layer - 1; l >= 0; --l) {
    TraceScope unit(TraceCategory::unit, unit_pass_name(l, "backward"));
    const GradWrite write = backward_needs(layout_.block_unit(l));
    const GradWrite adapter_write = layout_.has_adapters() ? backward_needs(layout_.adapter_unit(l)) : write;
    recompute_block(l);
    const LayerActivations& a = acts_.layers[l];
    const BlockTensors& w = params_.blocks[l];
    BlockTensors& g = grads_.blocks[l];
    // With post-norms each branch's output gradient is d_branch, the norm's backward from d_residual.
    if (config_.post_norms) {
      post_norm_backward(a.mlp_out, w.mlp_post_norm_weight, a.mlp_out_rstd, g.mlp_post_norm_weight, write);
    }
    mlp_output_backward(l, config_.post_norms ? acts_.d_branch : acts_.d_residual, write, adapter_write);
    linear_backward(l, AdaptedLinear::fc, acts_.d_fc, a.ln2.out, w.fc_weight, acts_.d_norm, g.fc_weight, g.fc_bias,
                    write, adapter_write);
    norm_backward(acts_.d_norm, a.mid, w.ln2_weight, a.ln2, acts_.d_residual, g.ln2_weight, g.ln2_bias, write);

    if (config_.post_norms) {
      post_norm_backward(a.attn_out, w.attn_post_norm_weight, a.attn_out_rstd, g.attn_post_norm_weight, write);
    }
    linear_backward(l, AdaptedLinear::attn_proj, config_.post_norms ? acts_.d_branch : acts_.d_residual, a.attention,
                    w.attn_proj_weight, acts_.d_attention, g.attn_proj_weight, g.attn_proj_bias, write, adapter_write);
    const AttentionShape shape = attention_shape(l);
    b.attention_backward(acts_.d_attention, a.qkv, a.attention, a.lse, shape, acts_.d_qkv);
    if (!config_.has_learned_positions()) b.rope_backward(acts_.d_qkv, inv_freq(l), shape);
    if (config_.qk_norm) {
      b.qk_norm_backward(acts_.d_qkv, a.qkv_raw, w.q_norm_weight, w.k_norm_weight, a.qk_rstd, gain_offset(), shape,
                         acts_.d_qkv_raw, g.q_norm_weight, g.k_norm_weight, write);
    }
    linear_backward(l, AdaptedLinear::qkv, config_.qk_norm ? acts_.d_qkv_raw : acts_.d_qkv, a.ln1.out, w.qkv_weight,
                    acts_.d_norm, g.qkv_weight, g.qkv_bias, write, adapter_write);
    norm_backward(acts_.d_norm, acts_.residual[l], w.ln1_weight, a.ln1, acts_.d_residual, g.ln1_weight, g.ln1_bias,
                  write);
    if (layout_.has_adapters()) backward_done(layout_.adapter_unit(l));
    backward_done(layout_.block_unit(l));
  }
  outer_unit.emplace(TraceCategory::unit, unit_name(embeddings) + " backward");
  // The lookup's backward needs only gradients; tied, the lm head has already written the table's. Frozen
  // embeddings (LoRA) have no gradient to compute.
  const GradWrite lookup_write = tied ? GradWrite::add : backward_needs(embeddings, /*reads_weights=*/false);
  // The scaled embeddings' gradient is the scaled gradient of their sum (d_residual is not read after this).
  if (config_.scale_embeddings) b.scale(acts_.d_residual, embedding_scale_, acts_.d_residual);
  if (!grads_.wte.empty()) b.embedding_backward(tokens, acts_.d_residual, grads_.wte, lookup_write);
  if (config_.has_learned_positions() && !grads_.wpe.empty()) {
    b.embedding_backward(positions_, acts_.d_residual, grads_.wpe, tied ? embeddings_write : lookup_write);
  }
  backward_done(embeddings);
}

void Transformer::norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, NormOutputs& out) {
  if (config_.norm == NormKind::layernorm) {
    backend_.layernorm_forward(x, weight, bias, float(config_.norm_eps), out.out, out.mean, out.rstd);
  } else {
    backend_.rmsnorm_forward(x, weight, float(config_.norm_eps), out.out, out.rstd, gain_offset());
  }
}

void Transformer::residual_norm_forward(const Tensor& a, const Tensor& branch, Tensor& residual_out,
                                        const Tensor& weight, const Tensor& bias, NormOutputs& out) {
  if (config_.norm == NormKind::layernorm) {
    backend_.residual_layernorm_forward(a, branch, residual_out, weight, bias, float(config_.norm_eps), out.out,
                                        out.mean, out.rstd);
  } else {
    backend_.residual_rmsnorm_forward(a, branch, residual_out, weight, float(config_.norm_eps), out.out, out.rstd,
                                      gain_offset());
  }
}

void Transformer::norm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const NormOutputs& saved,
                                Tensor& dx, Tensor& dweight, Tensor& dbias, GradWrite write) {
  // A frozen norm's weight gradient (no view bound) goes to a scratch nobody reads.
  const bool frozen = dweight.empty();
  Tensor& dw = frozen ? acts_.frozen_norm_weight_grad : dweight;
  Tensor& db = frozen ? acts_.frozen_norm_bias_grad : dbias;
  if (frozen) write = GradWrite::overwrite;
  if (config_.norm == NormKind::layernorm) {
    backend_.layernorm_backward(dout, x, weight, saved.mean, saved.rstd, dx, dw, db, write);
  } else {
    backend_.rmsnorm_backward(dout, x, weight, saved.rstd, dx, dw, write, gain_offset());
  }
}

void Transformer::linear_forward(int64_t l, AdaptedLinear linear, const Tensor& x, const Tensor& weight,
                                 const Tensor& bias, Tensor& out) {
  backend_.matmul_forward(x, weight, bias, out);
  add_adapter_forward(l, linear, x, out);
}

void Transformer::add_adapter_forward(int64_t l, AdaptedLinear linear, const Tensor& x, Tensor& out) {
  const LoraPair& adapter = params_.blocks[l].lora(linear);
  if (adapter.empty()) return;
  Tensor& inner = acts_.layers[l].lora_inner[size_t(linear)];
  backend_.gemm(adapter_input(l, linear, x), false, adapter.a, true, input_scale(), false, inner);  // s x A^T
  backend_.gemm(inner, false, adapter.b, true, 1.0, /*accumulate=*/true, out);                   // + (s x A^T) B^T
}

void Transformer::linear_backward(int64_t l, AdaptedLinear linear, const Tensor& dout, const Tensor& x,
                                  const Tensor& weight, Tensor& dx, Tensor& dweight, Tensor& dbias, GradWrite write,
                                  GradWrite adapter_write) {
  backend_.matmul_backward(dout, x, weight, dx, dweight, dbias, write);
  adapter_backward(l, linear, dout, x, dx, adapter_write);
}

void Transformer::adapter_backward(int64_t l, AdaptedLinear linear, const Tensor& dout, const Tensor& x, Tensor& dx,
                                   GradWrite write) {
  const LoraPair& adapter = params_.blocks[l].lora(linear);
  if (adapter.empty()) return;
  LoraPair& grads = grads_.blocks[l].lora(linear);
  const Tensor& inner = acts_.layers[l].lora_inner[size_t(linear)];
  Tensor& d_inner = acts_.d_lora_inner;
  const bool add = write == GradWrite::add;
  backend_.gemm(dout, true, inner, false, 1.0, add, grads.b);         // dB (+)= dout^T (s x A^T)
  backend_.gemm(dout, false, adapter.b, false, 1.0, false, d_inner);  // dout B
  // dA (+)= s (dout B)^T x, with x dropped again as the forward dropped it
  backend_.gemm(d_inner, true, adapter_input(l, linear, x), false, input_scale(), add, grads.a);
  if (config_.lora.dropout == 0) {
    backend_.gemm(d_inner, false, adapter.a, false, lora_scale_, true, dx);  // dx += s (dout B) A
    return;
  }
  // dx += mask(s (dout B) A) / (1 - p): dropout's backward is its mask and scale again (into the scratch the
  // dropped input, read by dA's product above, no longer needs)
  Tensor input_grad = acts_.lora_dropped.flat_slice(0, x.numel()).reshaped(x.shape);
  backend_.gemm(d_inner, false, adapter.a, false, input_scale(), false, input_grad);
  backend_.dropout_mask(input_grad, config_.lora.dropout, dropout_seed_, dropout_stream(l, linear), input_grad);
  backend_.residual_forward(dx, input_grad, dx);
}

const Tensor& Transformer::adapter_input(int64_t l, AdaptedLinear linear, const Tensor& x) {
  if (config_.lora.dropout == 0) return x;
  dropped_ = acts_.lora_dropped.flat_slice(0, x.numel()).reshaped(x.shape);
  backend_.dropout_mask(x, config_.lora.dropout, dropout_seed_, dropout_stream(l, linear), dropped_);
  return dropped_;
}

std::string Transformer::unit_pass_name(int64_t l, const char* pass) const {
  return unit_name(layout_.block_unit(l)) + " " + pass;
}

const std::string& Transformer::unit_name(size_t u) const { return layout_.unit(u).name; }

void Transformer::forward_needs_block(int64_t l) {
  forward_needs(layout_.block_unit(l));
  if (layout_.has_adapters()) forward_needs(layout_.adapter_unit(l));
}

void Transformer::forward_done_block(int64_t l) {
  if (layout_.has_adapters()) forward_done(layout_.adapter_unit(l));
  forward_done(layout_.block_unit(l));
}

void Transformer::mlp_input_forward(int64_t l) {
  LayerActivations& a = acts_.layers[l];
  const BlockTensors& w = params_.blocks[l];
  // GELU rides in the GEMM's epilogue where the backend has one, unless selective checkpointing recomputes the
  // activation (an epilogue applies GELU to the product before rounding it, which GELU applied to the stored,
  // rounded input does not reproduce) or an adapter adds to the product first. The other activations follow
  // the GEMM.
  if (config_.mlp == MlpKind::gelu && checkpointing_ != ActivationCheckpointing::selective && w.fc_lora.empty()) {
    return backend_.matmul_gelu_forward(a.ln2.out, w.fc_weight, w.fc_bias, a.fc, a.activated);
  }
  linear_forward(l, AdaptedLinear::fc, a.ln2.out, w.fc_weight, w.fc_bias, a.fc);
  activation_forward(a);
}

void Transformer::activation_forward(LayerActivations& a) {
  switch (config_.mlp) {
    case MlpKind::gelu: return backend_.gelu_forward(a.fc, a.activated);
    case MlpKind::relu: return backend_.relu_forward(a.fc, a.activated);
    case MlpKind::swiglu: return backend_.swiglu_forward(a.fc, a.activated);
    case MlpKind::geglu: return backend_.geglu_forward(a.fc, a.activated);
  }
}

void Transformer::mlp_output_backward(int64_t l, const Tensor& dout, GradWrite write, GradWrite adapter_write) {
  const LayerActivations& a = acts_.layers[l];
  const BlockTensors& w = params_.blocks[l];
  BlockTensors& g = grads_.blocks[l];
  // GELU's backward rides in the GEMM's epilogue where the backend has one, unless an adapter adds to the
  // activation's gradient first; the others follow the GEMM.
  if (config_.mlp == MlpKind::gelu && w.mlp_proj_lora.empty()) {
    return backend_.matmul_gelu_backward(dout, a.activated, w.mlp_proj_weight, a.fc, acts_.d_fc, g.mlp_proj_weight,
                                         g.mlp_proj_bias, write);
  }
  linear_backward(l, AdaptedLinear::mlp_proj, dout, a.activated, w.mlp_proj_weight, acts_.d_activated,
                  g.mlp_proj_weight, g.mlp_proj_bias, write, adapter_write);
  switch (config_.mlp) {
    case MlpKind::gelu: return backend_.gelu_backward(acts_.d_activated, a.fc, acts_.d_fc);
    case MlpKind::relu: return backend_.relu_backward(acts_.d_activated, a.fc, acts_.d_fc);
    case MlpKind::swiglu: return backend_.swiglu_backward(acts_.d_activated, a.fc, acts_.d_fc);
    case MlpKind::geglu: return backend_.geglu_backward(acts_.d_activated, a.fc, acts_.d_fc);
  }
}

namespace {

// Copies the per-token losses to the host and averages them in double, in token order.
template <typename T>
double mean_of(Backend& backend, const Tensor& losses) {
  std::vector<T> host(losses.numel());
  Tensor view(host.data(), losses.shape, losses.dtype, Device::cpu());
  backend.copy(losses, view);
  double sum = 0;
  for (T x : host) sum += x;
  return sum / double(host.size());
}

}  // namespace

double Transformer::mean_loss() {
  return acts_.losses.dtype == DType::f64 ? mean_of<double>(backend_, acts_.losses)
                                          : mean_of<float>(backend_, acts_.losses);
}

}  // namespace zb
