#include "models/transformer_config.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

void TransformerConfig::validate() const {
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw Error(cat("model '", name, "': ", what));
  };
  // Bounds far above any real model that keep every size derived from them (parameter counts, element
  // offsets, int32 token ids and positions) from overflowing.
  constexpr int64_t kMaxDim = int64_t(1) << 20, kMaxVocab = int64_t(1) << 24, kMaxSeq = int64_t(1) << 24;
  auto in_range = [](int64_t v, int64_t hi) { return 0 < v && v <= hi; };
  require(in_range(n_layer, 4096) && in_range(n_head, 4096) && in_range(n_kv_head, 4096),
          "layers and heads must be in [1, 4096]");
  require(in_range(d_model, kMaxDim) && in_range(d_ff, kMaxDim) && in_range(head_dim, 4096),
          cat("width, FFN width and head dimension must be in [1, ", kMaxDim, "]"));
  require(in_range(vocab_size, kMaxVocab), cat("the vocabulary size must be in [1, ", kMaxVocab, "]"));
  require(in_range(max_seq_len, kMaxSeq) && 0 <= position_offset && position_offset <= 1024,
          cat("the maximum sequence length must be in [1, ", kMaxSeq, "]"));
  require(n_head % n_kv_head == 0,
          cat("attention heads (", n_head, ") must be a multiple of key/value heads (", n_kv_head, ")"));
  require(n_head * head_dim <= kMaxDim, "heads x head dimension is too large");
  require(position != PositionKind::rotary || head_dim % 2 == 0,
          cat("the head dimension ", head_dim, " must be even for rotary embeddings"));
  require(std::isfinite(norm_eps) && norm_eps > 0, "the norm epsilon must be positive");
  require(position != PositionKind::rotary || (std::isfinite(rope_theta) && rope_theta > 1), "rope_theta must be > 1");
  if (rope_scaling) {
    const Llama3RopeScaling& s = *rope_scaling;
    require(std::isfinite(s.factor) && s.factor > 0 && std::isfinite(s.low_freq_factor) && s.low_freq_factor > 0 &&
                std::isfinite(s.high_freq_factor) && s.high_freq_factor > s.low_freq_factor &&
                s.original_max_position > 0,
            "llama3 rope scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
            "original_max_position_embeddings > 0");
  }
  require(!sliding_window || in_range(*sliding_window, kMaxSeq),
          cat("the sliding window must be in [1, ", kMaxSeq, "]"));
  const bool sliding_layers =
      std::find(layer_attention.begin(), layer_attention.end(), LayerAttention::sliding) != layer_attention.end();
  require(!sliding_layers || sliding_window, "sliding-attention layers need a sliding window");
  require(std::isfinite(rope_linear_factor) && rope_linear_factor > 0, "the linear rope scaling factor must be > 0");
  require(rope_linear_factor == 1.0 || !rope_scaling, "linear and llama3 rope scaling together");
  require(!local_rope_theta || (position == PositionKind::rotary && std::isfinite(*local_rope_theta) &&
                                *local_rope_theta > 1),
          "the local rope theta (rope_local_base_freq) must be > 1, with rotary embeddings");
  require(norm == NormKind::rmsnorm || (!qk_norm && !post_norms && norm_gain_offset == 0),
          "q/k norms, post-norms and a norm gain offset are RMSNorm's");
  // (The initial weights make every gain 1: ones, or zeros under an offset of 1.)
  require(norm_gain_offset == 0 || norm_gain_offset == 1, "the norm gain offset must be 0 or 1");
  require(!query_pre_attn_scalar || (std::isfinite(*query_pre_attn_scalar) && *query_pre_attn_scalar > 0),
          "query_pre_attn_scalar must be > 0");
  if (lora.enabled()) {
    require(lora.rank <= std::min(d_model, d_ff), cat("the LoRA rank ", lora.rank, " must be at most the width"));
    require(std::isfinite(lora.alpha) && lora.alpha > 0, "the LoRA alpha must be positive");
    require(0 <= lora.dropout && lora.dropout < 1, "the LoRA dropout must be in [0, 1)");
  }
}

bool TransformerConfig::sliding_layer(int64_t layer) const {
  if (!sliding_window) return false;
  return layer_attention.empty() || layer_attention[size_t(layer) % layer_attention.size()] == LayerAttention::sliding;
}

double TransformerConfig::attention_softmax_scale() const {
  if (!query_pre_attn_scalar || *query_pre_attn_scalar == double(head_dim)) return 0;
  return 1.0 / std::sqrt(*query_pre_attn_scalar);
}

std::string sequence_length_problem(const TransformerConfig& c, int64_t seq) {
  if (seq > c.max_seq_len) return cat(seq, " exceeds ", c.name, "'s maximum of ", c.max_seq_len);
  return {};
}

bool needs_banded_attention(const TransformerConfig& c, int64_t seq) {
  for (int64_t l = 0; l < c.n_layer; ++l)
    if (c.sliding_layer(l) && seq > c.layer_window(l)) return true;
  return false;
}

int64_t parameter_count(const TransformerConfig& c) {
  const int64_t d = c.d_model;
  const int64_t norm = c.norm == NormKind::layernorm ? 2 * d : d;  // gain (+ bias)
  const int64_t attention = c.qkv_width() * d + d * c.attention_width() + (c.bias ? c.qkv_width() + d : 0);
  const int64_t mlp = c.mlp_in_width() * d + d * c.d_ff + (c.bias ? c.mlp_in_width() + d : 0);
  const int64_t norms = (c.post_norms ? 4 : 2) * norm + (c.qk_norm ? 2 * c.head_dim : 0);
  const int64_t block = norms + attention + mlp;
  const int64_t embeddings =
      c.vocab_size * d + (c.has_learned_positions() ? (c.max_seq_len + c.position_offset) * d : 0);
  const int64_t head = c.tied_embeddings ? 0 : c.vocab_size * d;
  return embeddings + c.n_layer * block + norm + head;
}

double training_flops_per_token(const TransformerConfig& c, int64_t seq_len) {
  const double weights = c.lora.enabled() ? 4.0 * double(parameter_count(c)) + 6.0 * double(lora_parameter_count(c))
                                          : 6.0 * double(parameter_count(c));
  double keys = 0;  // over the layers
  for (int64_t l = 0; l < c.n_layer; ++l)
    keys += double(c.sliding_layer(l) ? std::min(seq_len, c.layer_window(l)) : seq_len);
  return weights + 12.0 * keys * double(c.attention_width());
}

std::string describe(const TransformerConfig& c) {
  const std::string norm = c.norm == NormKind::layernorm ? "LayerNorm"
                           : c.norm_gain_offset != 0      ? cat("RMSNorm (gain ", c.norm_gain_offset, " + w)")
                                                          : "RMSNorm";
  const char* pos = c.has_learned_positions() ? "learned positions" : "RoPE";
  const char* mlp = c.mlp == MlpKind::gelu   ? "GELU"
                    : c.mlp == MlpKind::relu ? "ReLU"
                    : c.mlp == MlpKind::geglu ? "GeGLU"
                                              : "SwiGLU";
  int64_t sliding = 0;
  for (int64_t l = 0; l < c.n_layer; ++l) sliding += c.sliding_layer(l);
  const std::string window = !c.sliding_window ? std::string()
                             : c.layer_attention.empty()
                                 ? cat(", sliding window ", *c.sliding_window)
                                 : cat(", sliding window ", *c.sliding_window, " in ", sliding, " of ", c.n_layer,
                                       " layers", c.local_rope_theta ? cat(" (rope theta ", *c.local_rope_theta, ")")
                                                                     : std::string());
  const std::string gemma = cat(c.qk_norm ? ", q/k norms" : "", c.post_norms ? ", post-norms" : "",
                                c.scale_embeddings ? ", embeddings x sqrt(width)" : "",
                                c.attention_softmax_scale() != 0
                                    ? cat(", attention scale ", *c.query_pre_attn_scalar, "^-0.5")
                                    : std::string(),
                                c.rope_linear_factor != 1 ? cat(", rope linear factor ", c.rope_linear_factor)
                                                          : std::string());
  return cat(c.name, ": ", parameter_count(c) / 1e6, "M parameters, ", c.n_layer, " layers, width ", c.d_model, ", ",
             c.n_head, " heads (", c.n_kv_head, " kv), FFN ", c.d_ff, ", vocab ", c.vocab_size, ", ", norm, ", ", pos,
             ", ", mlp, c.tied_embeddings ? ", tied embeddings" : "", window, gemma,
             c.lora.enabled() ? cat("; LoRA rank ", c.lora.rank, " alpha ", c.lora.alpha, " on ",
                                    lora_targets_name(c.lora.targets),
                                    c.lora.dropout > 0 ? cat(", dropout ", c.lora.dropout) : std::string(), " (",
                                    lora_parameter_count(c) / 1e6, "M trained, the rest frozen)")
                              : std::string());
}

}  // namespace zb
