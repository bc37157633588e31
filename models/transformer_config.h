// TransformerConfig: one description for the decoder-only families we train.
//   GPT-2: LayerNorm, learned positions, GELU (tanh), biases, tied embeddings.
//   OPT:   as GPT-2 with ReLU, a separate FFN width and learned positions offset by 2.
//   Llama: RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases, untied head by default.
//   Mistral: Llama's block; v0.1 limits each query's attention to a sliding window of recent positions.
//   Gemma 3: RMSNorm with gains 1 + w, around each branch (before and after) and on the queries' and keys' heads;
//            GeGLU; embeddings scaled by sqrt(width); five of every six layers attend through a sliding window
//            with their own rotary base; an attention scale of its own (query_pre_attn_scalar); tied embeddings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/lora.h"

namespace zb {

enum class NormKind { layernorm, rmsnorm };
enum class PositionKind { learned, rotary };
enum class MlpKind { gelu, relu, swiglu, geglu };
// What a layer's attention spans: every earlier position, or the sliding window's latest ones.
enum class LayerAttention { full, sliding };

// Llama 3's frequency-dependent stretching of the rotary frequencies ("rope_type": "llama3").
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

struct TransformerConfig {
  std::string name;
  NormKind norm = NormKind::layernorm;
  PositionKind position = PositionKind::learned;
  MlpKind mlp = MlpKind::gelu;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t d_model = 0;
  int64_t head_dim = 0;
  int64_t d_ff = 0;          // hidden width of the MLP (per branch for SwiGLU)
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;
  int64_t position_offset = 0;  // OPT's learned positions start at row 2
  bool bias = true;
  bool tied_embeddings = true;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  std::optional<Llama3RopeScaling> rope_scaling;
  // "linear" rotary scaling (Gemma 3 4B and up): the full-attention layers' frequencies divided by this factor (1:
  // none). Never with rope_scaling.
  double rope_linear_factor = 1.0;
  // The sliding-window layers' own rotary base (Gemma 3's rope_local_base_freq), unscaled; unset: rope_theta with its
  // scaling, as the other layers.
  std::optional<double> local_rope_theta;
  // Sliding-window attention (Mistral v0.1, Gemma 3's local layers): a query attends to the `sliding_window` latest
  // positions, itself included; unset, to every earlier position. A sequence no longer than the window is plain
  // causal attention.
  std::optional<int64_t> sliding_window;
  // Which layers attend through the window: layer l as entry l % size, a pattern that repeats (Gemma 3's
  // sliding_window_pattern of 6: five sliding layers, then a full one) or one entry a layer (a file's layer_types);
  // so a copy with more or fewer layers keeps the pattern. Empty: every layer, where there is a window (Mistral).
  std::vector<LayerAttention> layer_attention;
  // Gemma 3's block. qk_norm: an RMSNorm over each query and key head (gains [head_dim] for the queries and for the
  // keys) after the projection, before the rotary embedding. post_norms: RMSNorms of the attention's and the MLP's
  // outputs before their residual adds (the norms before them are the usual two). scale_embeddings: the embedding
  // rows times sqrt(d_model), that factor first rounded to the data's dtype (as Hugging Face rounds it).
  bool qk_norm = false;
  bool post_norms = false;
  bool scale_embeddings = false;
  // Every RMSNorm's gain is norm_gain_offset + weight (Gemma: 1 + w, its weights starting at zero); 0 elsewhere.
  double norm_gain_offset = 0.0;
  // The attention scores' scale is query_pre_attn_scalar^-0.5 (Gemma); unset: head_dim^-0.5.
  std::optional<double> query_pre_attn_scalar;
  LoraConfig lora;  // adapters trained beside the frozen model (off by default)

  // The embedding and head rows, rounded up to a multiple of 128 so that matrix shapes stay aligned for
  // fast GEMMs; the extra rows are zero, are not trained and are not counted as parameters.
  int64_t padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  int64_t qkv_width() const { return (n_head + 2 * n_kv_head) * head_dim; }
  int64_t attention_width() const { return n_head * head_dim; }
  int64_t mlp_in_width() const { return gated_mlp() ? 2 * d_ff : d_ff; }
  bool gated_mlp() const { return mlp == MlpKind::swiglu || mlp == MlpKind::geglu; }
  bool has_learned_positions() const { return position == PositionKind::learned; }
  // Whether layer `layer` attends through the sliding window, and that window (0: every earlier position).
  bool sliding_layer(int64_t layer) const;
  int64_t layer_window(int64_t layer) const { return sliding_layer(layer) ? *sliding_window : 0; }
  // Whether layer `layer` rotates by the local rotary base (local_rope_theta) rather than rope_theta.
  bool local_rope_layer(int64_t layer) const { return local_rope_theta.has_value() && sliding_layer(layer); }
  // The attention's softmax scale as AttentionShape::softmax_scale takes it: 0 where it is head_dim^-0.5.
  double attention_softmax_scale() const;

  // Throws zb::Error naming the first inconsistent field.
  void validate() const;
};

// Why `config` cannot train sequences of `seq` tokens (longer than its maximum), or empty where it can. The programs
// refuse such a --seq-length before any work starts.
std::string sequence_length_problem(const TransformerConfig& config, int64_t seq);
// Whether sequences of `seq` tokens are longer than the model's sliding window in some layer (attention over a band of
// keys).
bool needs_banded_attention(const TransformerConfig& config, int64_t seq);

// The published parameter count: every weight of the base model once (tied embeddings once), without vocab
// padding or LoRA adapters.
int64_t parameter_count(const TransformerConfig& config);

// Training FLOPs per token, counted as the PyTorch reference and llm.c count them so that TFLOP/s and MFU
// compare: 6 per parameter, plus 12 * layers * seq * attention width for the two T x T products of attention
// (forward and backward, without halving for the causal mask; in a layer whose sliding window is narrower than
// seq, the window in place of seq). With LoRA the frozen weights count 4 (the
// forward and the input's gradient; their own gradient is not computed) and the adapters 6.
double training_flops_per_token(const TransformerConfig& config, int64_t seq_len);

std::string describe(const TransformerConfig& config);

}  // namespace zb
