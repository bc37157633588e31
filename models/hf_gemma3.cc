#include "models/hf_gemma3.h"

#include <algorithm>
#include <string>
#include <vector>

namespace zb::hf {

namespace {

using nlohmann::json;

// A rotary parameters object's "linear" factor (1 for the default type): "rope_type", or the older "type".
double linear_rope_factor(const Fields& rope) {
  const auto type = rope.optional<std::string>("rope_type", rope.optional<std::string>("type", "default"));
  if (type == "default") return 1.0;
  require(type == "linear", cat(rope.name("rope_type"), " '", type, "' (default and linear are supported)"));
  return rope.required<double>("factor");
}

// Which layers attend through the window: "layer_types" where the file lists them, else the repeating pattern of
// sliding_window_pattern (default 6) layers, the last of them full: layer i slides unless (i + 1) is a multiple of
// the pattern, as Gemma3TextConfig derives its layer types.
std::vector<LayerAttention> layer_types(const Fields& f, int64_t layers) {
  std::vector<LayerAttention> types;
  if (f.has("layer_types")) {
    const json& list = f.at("layer_types");
    if (!list.is_array()) throw Error(cat("field '", f.name("layer_types"), "' must be a list"));
    require(int64_t(list.size()) == layers,
            cat(f.name("layer_types"), " lists ", list.size(), " layers for num_hidden_layers ", layers));
    for (const json& type : list) {
      const std::string name = type.is_string() ? type.get<std::string>() : type.dump();
      require(name == "sliding_attention" || name == "full_attention",
              cat(f.name("layer_types"), " entry '", name, "' (sliding_attention and full_attention are supported)"));
      types.push_back(name == "sliding_attention" ? LayerAttention::sliding : LayerAttention::full);
    }
    return types;
  }
  const int64_t pattern = f.optional<int64_t>("sliding_window_pattern", 6);
  require(1 <= pattern && pattern <= 4096, cat(f.name("sliding_window_pattern"), " ", pattern, " (not in [1, 4096])"));
  types.assign(size_t(pattern), LayerAttention::sliding);
  types.back() = LayerAttention::full;
  return types;
}

// The rotary bases and the full-attention layers' scaling: newer files give "rope_parameters" with an entry for each
// layer type; older ones rope_theta (full attention), rope_local_base_freq (sliding) and rope_scaling (full).
void read_rope(const Fields& f, TransformerConfig& c) {
  const double theta = f.optional<double>("rope_theta", 1e6);
  const double local_theta = f.optional<double>("rope_local_base_freq", 1e4);
  if (f.has("rope_parameters")) {
    const Fields rope = f.object("rope_parameters");
    require(rope.has("full_attention") && rope.has("sliding_attention"),
            cat(f.name("rope_parameters"), " without full_attention and sliding_attention entries"));
    const Fields full = rope.object("full_attention"), sliding = rope.object("sliding_attention");
    c.rope_theta = full.optional<double>("rope_theta", theta);
    c.rope_linear_factor = linear_rope_factor(full);
    c.local_rope_theta = sliding.optional<double>("rope_theta", local_theta);
    require(linear_rope_factor(sliding) == 1.0,
            cat(sliding.name("rope_type"), " other than default (scaled rotary frequencies in the sliding layers)"));
    return;
  }
  c.rope_theta = theta;
  c.local_rope_theta = local_theta;
  if (f.has("rope_scaling")) c.rope_linear_factor = linear_rope_factor(f.object("rope_scaling"));
}

}  // namespace

TransformerConfig gemma3_text_config(const Fields& f) {
  TransformerConfig c;
  c.norm = NormKind::rmsnorm;
  c.norm_gain_offset = 1.0;
  c.position = PositionKind::rotary;
  c.mlp = MlpKind::geglu;
  c.bias = false;
  c.qk_norm = c.post_norms = c.scale_embeddings = true;
  // Gemma3TextConfig's defaults where the file has no value.
  c.n_layer = f.optional<int64_t>("num_hidden_layers", 26);
  c.n_head = f.optional<int64_t>("num_attention_heads", 8);
  c.n_kv_head = f.optional<int64_t>("num_key_value_heads", 4);
  c.d_model = f.optional<int64_t>("hidden_size", 2304);
  c.head_dim = f.optional<int64_t>("head_dim", 256);
  c.d_ff = f.optional<int64_t>("intermediate_size", 9216);
  c.vocab_size = f.optional<int64_t>("vocab_size", 262208);
  c.max_seq_len = f.optional<int64_t>("max_position_embeddings", 131072);
  c.norm_eps = f.optional<double>("rms_norm_eps", 1e-6);
  c.tied_embeddings = f.optional<bool>("tie_word_embeddings", true);
  c.query_pre_attn_scalar = f.optional<double>("query_pre_attn_scalar", 256.0);

  const auto activation = f.optional<std::string>("hidden_activation", "gelu_pytorch_tanh");
  require(activation == "gelu_pytorch_tanh",
          cat(f.name("hidden_activation"), " '", activation, "' (Gemma 3 uses gelu_pytorch_tanh)"));
  require(!f.optional<bool>("attention_bias", false),
          cat(f.name("attention_bias"), " true (biases on the q, k, v and output projections)"));
  require(f.optional<double>("attention_dropout", 0.0) == 0.0, cat(f.name("attention_dropout"), " other than 0"));
  for (const char* capping : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    require(!f.has(capping), cat(f.name(capping), " ", f.has(capping) ? f.at(capping).dump() : std::string(),
                                 " (tanh soft-capping; only null is supported)"));
  }
  require(!f.optional<bool>("use_bidirectional_attention", false),
          cat(f.name("use_bidirectional_attention"), " true (attention to later positions)"));

  // A sliding layer's query t attends to the keys t - sliding_window < u <= t: sliding_window keys, its own included
  // (AttentionShape::window). So transformers' eager and sdpa masks have kept them in every version with Gemma 3
  // (kv_idx > q_idx - sliding_window); its flash-attention path kept one more, window_size (W, W), until the fix
  // of its issue 39408 (pull request 40163, August 2025) made it (W - 1, W - 1) too.
  c.layer_attention = layer_types(f, c.n_layer);
  const bool any_sliding =
      std::find(c.layer_attention.begin(), c.layer_attention.end(), LayerAttention::sliding) != c.layer_attention.end();
  if (f.has("sliding_window")) {
    c.sliding_window = f.required<int64_t>("sliding_window");
  } else if (!f.present("sliding_window")) {
    c.sliding_window = 4096;
  } else {
    require(!any_sliding, cat(f.name("sliding_window"), " null with sliding_attention layers"));
  }
  read_rope(f, c);
  return c;
}

TransformerConfig gemma3_config(const Fields& f) {
  static const json kNoTextConfig = json::object();
  const Fields text = f.has("text_config") ? f.object("text_config") : Fields(kNoTextConfig, "text_config.");
  const auto text_type = text.optional<std::string>("model_type", "gemma3_text");
  require(text_type == "gemma3_text", cat(text.name("model_type"), " '", text_type, "' (gemma3_text is supported)"));
  TransformerConfig c = gemma3_text_config(text);
  require(f.optional<bool>("tie_word_embeddings", true) == c.tied_embeddings,
          "tie_word_embeddings of the wrapper and of its text_config differ");
  return c;
}

}  // namespace zb::hf
