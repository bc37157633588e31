// TransformerConfig: one description for the decoder-only families we train.
//   GPT-2: LayerNorm, learned positions, GELU (tanh), biases, tied embeddings.
//   OPT:   as GPT-2 with ReLU, a separate FFN width and learned positions offset by 2.
//   Llama: RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases, untied head by default.
//   Mistral: Llama's block; v0.1 limits each query's attention to a sliding window of recent positions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/lora.h"

namespace zb {

enum class NormKind { layernorm, rmsnorm };
enum class PositionKind { learned, rotary };
enum class MlpKind { gelu, relu, swiglu };

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
  // Sliding-window attention (Mistral v0.1): a query attends to the `sliding_window` latest positions, itself
  // included; unset, to every earlier position. A sequence no longer than the window is plain causal attention.
  std::optional<int64_t> sliding_window;
  LoraConfig lora;  // adapters trained beside the frozen model (off by default)

  // The embedding and head rows, rounded up to a multiple of 128 so that matrix shapes stay aligned for
  // fast GEMMs; the extra rows are zero, are not trained and are not counted as parameters.
  int64_t padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  int64_t qkv_width() const { return (n_head + 2 * n_kv_head) * head_dim; }
  int64_t attention_width() const { return n_head * head_dim; }
  int64_t mlp_in_width() const { return mlp == MlpKind::swiglu ? 2 * d_ff : d_ff; }
  bool has_learned_positions() const { return position == PositionKind::learned; }

  // Throws zb::Error naming the first inconsistent field.
  void validate() const;
};

// Why `config` cannot train sequences of `seq` tokens (longer than its maximum), or empty where it can. The programs
// refuse such a --seq-length before any work starts.
std::string sequence_length_problem(const TransformerConfig& config, int64_t seq);
// Whether sequences of `seq` tokens are longer than the model's sliding window (attention over a band of keys).
bool needs_banded_attention(const TransformerConfig& config, int64_t seq);

// The published parameter count: every weight of the base model once (tied embeddings once), without vocab
// padding or LoRA adapters.
int64_t parameter_count(const TransformerConfig& config);

// Training FLOPs per token, counted as the PyTorch reference and llm.c count them so that TFLOP/s and MFU
// compare: 6 per parameter, plus 12 * layers * seq * attention width for the two T x T products of attention
// (forward and backward, without halving for the causal mask; with a sliding window narrower than seq, the
// window in place of seq). With LoRA the frozen weights count 4 (the
// forward and the input's gradient; their own gradient is not computed) and the adapters 6.
double training_flops_per_token(const TransformerConfig& config, int64_t seq_len);

std::string describe(const TransformerConfig& config);

}  // namespace zb
