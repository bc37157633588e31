#include "models/transformer_config.h"

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

void TransformerConfig::validate() const {
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw Error(cat("model '", name, "': ", what));
  };
  require(n_layer > 0 && n_head > 0 && d_model > 0 && d_ff > 0, "layers, heads, width and FFN width must be positive");
  require(vocab_size > 0 && max_seq_len > 0, "vocabulary size and maximum sequence length must be positive");
  require(n_kv_head > 0 && n_head % n_kv_head == 0,
          cat("attention heads (", n_head, ") must be a multiple of key/value heads (", n_kv_head, ")"));
  require(head_dim > 0 && head_dim % 2 == 0, cat("head dimension ", head_dim, " must be positive and even"));
  require(norm_eps > 0, "the norm epsilon must be positive");
  require(position != PositionKind::rotary || rope_theta > 0, "rope_theta must be positive");
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
  return 6.0 * double(parameter_count(c)) + 12.0 * double(c.n_layer) * double(seq_len) * double(c.attention_width());
}

std::string describe(const TransformerConfig& c) {
  const char* norm = c.norm == NormKind::layernorm ? "LayerNorm" : "RMSNorm";
  const char* pos = c.has_learned_positions() ? "learned positions" : "RoPE";
  const char* mlp = c.mlp == MlpKind::gelu ? "GELU" : c.mlp == MlpKind::relu ? "ReLU" : "SwiGLU";
  return cat(c.name, ": ", parameter_count(c) / 1e6, "M parameters, ", c.n_layer, " layers, width ", c.d_model, ", ",
             c.n_head, " heads (", c.n_kv_head, " kv), FFN ", c.d_ff, ", vocab ", c.vocab_size, ", ", norm, ", ", pos,
             ", ", mlp, c.tied_embeddings ? ", tied embeddings" : "");
}

}  // namespace zb
