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
  if (lora.enabled()) {
    require(lora.rank <= std::min(d_model, d_ff), cat("the LoRA rank ", lora.rank, " must be at most the width"));
    require(std::isfinite(lora.alpha) && lora.alpha > 0, "the LoRA alpha must be positive");
    require(0 <= lora.dropout && lora.dropout < 1, "the LoRA dropout must be in [0, 1)");
  }
}

std::string sequence_length_problem(const TransformerConfig& c, int64_t seq) {
  if (seq > c.max_seq_len) return cat(seq, " exceeds ", c.name, "'s maximum of ", c.max_seq_len);
  return {};
}

bool needs_banded_attention(const TransformerConfig& c, int64_t seq) {
  return c.sliding_window && seq > *c.sliding_window;
}

int64_t parameter_count(const TransformerConfig& c) {
  const int64_t d = c.d_model;
  const int64_t norm = c.norm == NormKind::layernorm ? 2 * d : d;  // gain (+ bias)
  const int64_t attention = c.qkv_width() * d + d * c.attention_width() + (c.bias ? c.qkv_width() + d : 0);
  const int64_t mlp = c.mlp_in_width() * d + d * c.d_ff + (c.bias ? c.mlp_in_width() + d : 0);
  const int64_t block = 2 * norm + attention + mlp;
  const int64_t embeddings =
      c.vocab_size * d + (c.has_learned_positions() ? (c.max_seq_len + c.position_offset) * d : 0);
  const int64_t head = c.tied_embeddings ? 0 : c.vocab_size * d;
  return embeddings + c.n_layer * block + norm + head;
}

double training_flops_per_token(const TransformerConfig& c, int64_t seq_len) {
  const double weights = c.lora.enabled() ? 4.0 * double(parameter_count(c)) + 6.0 * double(lora_parameter_count(c))
                                          : 6.0 * double(parameter_count(c));
  const double keys = c.sliding_window ? double(std::min(seq_len, *c.sliding_window)) : double(seq_len);
  return weights + 12.0 * double(c.n_layer) * keys * double(c.attention_width());
}

std::string describe(const TransformerConfig& c) {
  const char* norm = c.norm == NormKind::layernorm ? "LayerNorm" : "RMSNorm";
  const char* pos = c.has_learned_positions() ? "learned positions" : "RoPE";
  const char* mlp = c.mlp == MlpKind::gelu ? "GELU" : c.mlp == MlpKind::relu ? "ReLU" : "SwiGLU";
  return cat(c.name, ": ", parameter_count(c) / 1e6, "M parameters, ", c.n_layer, " layers, width ", c.d_model, ", ",
             c.n_head, " heads (", c.n_kv_head, " kv), FFN ", c.d_ff, ", vocab ", c.vocab_size, ", ", norm, ", ", pos,
             ", ", mlp, c.tied_embeddings ? ", tied embeddings" : "",
             c.sliding_window ? cat(", sliding window ", *c.sliding_window) : std::string(),
             c.lora.enabled() ? cat("; LoRA rank ", c.lora.rank, " alpha ", c.lora.alpha, " on ",
                                    lora_targets_name(c.lora.targets),
                                    c.lora.dropout > 0 ? cat(", dropout ", c.lora.dropout) : std::string(), " (",
                                    lora_parameter_count(c) / 1e6, "M trained, the rest frozen)")
                              : std::string());
}

}  // namespace zb
