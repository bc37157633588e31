#include "models/hf_config.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/strings.h"
#include "models/hf_fields.h"
#include "models/hf_gemma3.h"

namespace zb {

namespace {

using nlohmann::json;
using hf::Fields;
using hf::require;

// GPT-2 and OPT split the width evenly over the heads (Hugging Face refuses anything else).
int64_t even_head_dim(int64_t width, int64_t heads) {
  require(heads > 0 && width % heads == 0, cat("the width ", width, " does not split evenly over ", heads, " heads"));
  return width / heads;
}

TransformerConfig from_gpt2(const Fields& f) {
  TransformerConfig c;
  c.n_layer = f.required<int64_t>("n_layer");
  c.n_head = c.n_kv_head = f.required<int64_t>("n_head");
  c.d_model = f.required<int64_t>("n_embd");
  c.head_dim = even_head_dim(c.d_model, c.n_head);
  c.d_ff = f.optional<int64_t>("n_inner", 4 * c.d_model);
  c.vocab_size = f.required<int64_t>("vocab_size");
  c.max_seq_len = f.optional<int64_t>("n_positions", 1024);
  c.norm_eps = f.optional<double>("layer_norm_epsilon", 1e-5);
  c.tied_embeddings = f.optional<bool>("tie_word_embeddings", true);
  const auto activation = f.optional<std::string>("activation_function", "gelu_new");
  require(activation == "gelu_new" || activation == "gelu_pytorch_tanh",
          cat("activation_function '", activation, "' (the tanh GELU, gelu_new, is supported)"));
  require(f.optional<bool>("scale_attn_weights", true), "scale_attn_weights false (unscaled attention)");
  require(!f.optional<bool>("scale_attn_by_inverse_layer_idx", false), "scale_attn_by_inverse_layer_idx true");
  return c;
}

TransformerConfig from_opt(const Fields& f) {
  TransformerConfig c;
  c.mlp = MlpKind::relu;
  c.n_layer = f.required<int64_t>("num_hidden_layers");
  c.n_head = c.n_kv_head = f.required<int64_t>("num_attention_heads");
  c.d_model = f.required<int64_t>("hidden_size");
  c.head_dim = even_head_dim(c.d_model, c.n_head);
  c.d_ff = f.required<int64_t>("ffn_dim");
  c.vocab_size = f.required<int64_t>("vocab_size");
  c.max_seq_len = f.required<int64_t>("max_position_embeddings");
  c.position_offset = 2;
  c.bias = f.optional<bool>("enable_bias", true);
  c.tied_embeddings = f.optional<bool>("tie_word_embeddings", true);
  const auto activation = f.optional<std::string>("activation_function", "relu");
  require(activation == "relu", cat("activation_function '", activation, "' (OPT uses relu)"));
  require(f.optional<bool>("do_layer_norm_before", true), "do_layer_norm_before false (post-LN OPT-350m)");
  require(f.optional<int64_t>("word_embed_proj_dim", c.d_model) == c.d_model,
          "word_embed_proj_dim different from hidden_size (projected embeddings)");
  require(f.optional<bool>("layer_norm_elementwise_affine", true), "layer_norm_elementwise_affine false");
  require(!f.optional<bool>("_remove_final_layer_norm", false), "_remove_final_layer_norm true");
  return c;
}

TransformerConfig from_llama(const Fields& f) {
  TransformerConfig c;
  c.norm = NormKind::rmsnorm;
  c.position = PositionKind::rotary;
  c.mlp = MlpKind::swiglu;
  c.n_layer = f.required<int64_t>("num_hidden_layers");
  c.n_head = f.required<int64_t>("num_attention_heads");
  c.n_kv_head = f.optional<int64_t>("num_key_value_heads", c.n_head);
  c.d_model = f.required<int64_t>("hidden_size");
  // Without an explicit head_dim the heads split the width: a width they do not divide is a mistake in the
  // config (the remainder would silently drop out of the attention), not a model.
  c.head_dim = f.has("head_dim") ? f.required<int64_t>("head_dim") : even_head_dim(c.d_model, c.n_head);
  c.d_ff = f.required<int64_t>("intermediate_size");
  c.vocab_size = f.required<int64_t>("vocab_size");
  c.max_seq_len = f.optional<int64_t>("max_position_embeddings", 2048);
  c.norm_eps = f.optional<double>("rms_norm_eps", 1e-6);
  c.tied_embeddings = f.optional<bool>("tie_word_embeddings", false);
  const bool attention_bias = f.optional<bool>("attention_bias", false);
  const bool mlp_bias = f.optional<bool>("mlp_bias", false);
  require(attention_bias == mlp_bias, "attention_bias and mlp_bias differ");
  c.bias = attention_bias;
  const auto activation = f.optional<std::string>("hidden_act", "silu");
  require(activation == "silu", cat("hidden_act '", activation, "' (Llama uses silu)"));
  require(f.optional<double>("attention_dropout", 0.0) == 0.0, "attention_dropout other than 0");

  // Newer files keep rope_theta and the scaling inside "rope_parameters"; older ones at the top level.
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (f.has(key) && !f.at(key).is_object()) throw Error(cat("field '", key, "' must be an object"));
  }
  const json empty = json::object();
  const Fields rope(f.has("rope_parameters") ? f.at("rope_parameters") : f.has("rope_scaling") ? f.at("rope_scaling")
                                                                                                  : empty);
  c.rope_theta = rope.optional<double>("rope_theta", f.optional<double>("rope_theta", 10000.0));
  const auto rope_type = rope.optional<std::string>("rope_type", rope.optional<std::string>("type", "default"));
  if (rope_type == "llama3") {
    c.rope_scaling = Llama3RopeScaling{rope.required<double>("factor"), rope.required<double>("low_freq_factor"),
                                       rope.required<double>("high_freq_factor"),
                                       rope.required<int64_t>("original_max_position_embeddings")};
  } else {
    require(rope_type == "default", cat("rope type '", rope_type, "' (default and llama3 are supported)"));
  }
  return c;
}

// Mistral: Llama's block and fields, with MistralConfig's defaults where a field is absent (8 key/value heads, 4096 x
// 32 positions, a sliding window of 4096), and the sliding window (v0.1: 4096; null from v0.2 on: plain causal
// attention; absent: the default's 4096).
TransformerConfig from_mistral(const Fields& f) {
  TransformerConfig c = from_llama(f);
  if (!f.has("num_key_value_heads")) c.n_kv_head = 8;
  c.max_seq_len = f.optional<int64_t>("max_position_embeddings", 4096 * 32);
  if (f.has("sliding_window")) {
    c.sliding_window = f.required<int64_t>("sliding_window");
  } else if (!f.present("sliding_window")) {
    c.sliding_window = 4096;
  }
  return c;
}

}  // namespace

TransformerConfig config_from_hf_json(const json& j, const std::string& name) {
  if (!j.is_object()) throw Error("a config.json must hold a JSON object");
  const Fields fields(j);
  const auto model_type = fields.required<std::string>("model_type");
  TransformerConfig c;
  if (model_type == "gpt2") {
    c = from_gpt2(fields);
  } else if (model_type == "opt") {
    c = from_opt(fields);
  } else if (model_type == "llama") {
    c = from_llama(fields);
  } else if (model_type == "mistral") {
    c = from_mistral(fields);
  } else if (model_type == "gemma3_text") {
    c = hf::gemma3_text_config(fields);
  } else if (model_type == "gemma3") {
    c = hf::gemma3_config(fields);
  } else {
    throw Error(cat("model_type '", model_type,
                    "' is not supported (supported: gpt2, opt, llama, mistral, gemma3_text, gemma3)"));
  }
  c.name = name;
  c.validate();
  return c;
}

TransformerConfig config_from_hf_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(cat("cannot open '", path, "'"));
  try {
    const json j = json::parse(in);
    return config_from_hf_json(j, j.value("_name_or_path", path));
  } catch (const json::exception& e) {
    throw Error(cat("'", path, "' is not a valid config.json: ", e.what()));
  } catch (const Error& e) {
    throw Error(cat("'", path, "': ", e.what()));
  }
}

}  // namespace zb
