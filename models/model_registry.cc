#include "models/model_registry.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/strings.h"
#include "models/hf_config.h"

namespace zb {

namespace {

TransformerConfig gpt2_like(std::string name, int64_t layers, int64_t heads, int64_t width) {
  TransformerConfig c;
  c.name = std::move(name);
  c.n_layer = layers;
  c.n_head = c.n_kv_head = heads;
  c.d_model = width;
  c.head_dim = width / heads;
  c.d_ff = 4 * width;
  c.vocab_size = 50257;
  c.max_seq_len = 1024;
  return c;
}

TransformerConfig llama_like(std::string name, int64_t layers, int64_t heads, int64_t kv_heads, int64_t width,
                             int64_t ffn, int64_t vocab, int64_t max_seq, bool tied, double theta) {
  TransformerConfig c;
  c.name = std::move(name);
  c.norm = NormKind::rmsnorm;
  c.position = PositionKind::rotary;
  c.mlp = MlpKind::swiglu;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_kv_head = kv_heads;
  c.d_model = width;
  c.head_dim = width / heads;
  c.d_ff = ffn;
  c.vocab_size = vocab;
  c.max_seq_len = max_seq;
  c.bias = false;
  c.tied_embeddings = tied;
  c.rope_theta = theta;
  return c;
}

TransformerConfig opt_1_3b() {
  TransformerConfig c = gpt2_like("facebook/opt-1.3b", 24, 32, 2048);
  c.mlp = MlpKind::relu;
  c.d_ff = 8192;
  c.vocab_size = 50272;
  c.max_seq_len = 2048;
  c.position_offset = 2;
  return c;
}

TransformerConfig llama_3_2_1b() {
  TransformerConfig c =
      llama_like("meta-llama/Llama-3.2-1B", 16, 32, 8, 2048, 8192, 128256, 131072, /*tied=*/true, 500000.0);
  c.rope_scaling = Llama3RopeScaling{32.0, 1.0, 4.0, 8192};
  return c;
}

// Mistral 7B v0.3 (base and instruct share the architecture): Llama's block with grouped-query attention, a vocabulary
// of 32768, rope_theta 1e6, no sliding window.
TransformerConfig mistral_7b_v0_3(std::string name) {
  return llama_like(std::move(name), 32, 32, 8, 4096, 14336, 32768, 32768, /*tied=*/false, 1000000.0);
}

// Gemma 3 1B (pt and it share the architecture), read from its released config.json, abridged to the fields that
// decide the architecture: the Gemma 3 block of hf_gemma3.h, 26 layers of width 1152, 4 query heads and 1 key/value
// head of 256, a window of 512 in five layers of every six, tied embeddings of 262144 rows.
TransformerConfig gemma_3_1b(const std::string& name) {
  return config_from_hf_json(nlohmann::json::parse(R"({"model_type": "gemma3_text", "attention_bias": false,
      "attention_dropout": 0.0, "attn_logit_softcapping": null, "final_logit_softcapping": null, "head_dim": 256,
      "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
      "max_position_embeddings": 32768, "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
      "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": null,
      "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144})"),
                             name);
}

// Gemma 3's block at llama-tiny's size: 2 layers with a pattern of 2 (a sliding layer, then a full one), a window of
// 8 (half the tests' 16 tokens), head_dim 32 against a width of 64 over 4 heads (2 key/value heads).
TransformerConfig gemma3_tiny() {
  return config_from_hf_json(nlohmann::json::parse(R"({"model_type": "gemma3_text", "head_dim": 32,
      "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 64, "num_attention_heads": 4,
      "num_hidden_layers": 2, "num_key_value_heads": 2, "query_pre_attn_scalar": 32, "rms_norm_eps": 1e-06,
      "rope_local_base_freq": 10000, "rope_theta": 1000000, "sliding_window": 8, "sliding_window_pattern": 2,
      "vocab_size": 256})"),
                             "gemma3-tiny");
}

// Small enough to train on two CPU cores in seconds; llama-tiny uses grouped-query attention (4 heads, 2 kv).
TransformerConfig gpt2_tiny() {
  TransformerConfig c = gpt2_like("gpt2-tiny", 2, 4, 64);
  c.vocab_size = 256;
  c.max_seq_len = 64;
  return c;
}

TransformerConfig llama_tiny() {
  return llama_like("llama-tiny", 2, 4, 2, 64, 176, 256, 64, /*tied=*/false, 10000.0);
}

struct Entry {
  TransformerConfig config;
  std::vector<std::string> aliases;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {gpt2_like("gpt2", 12, 12, 768), {"openai-community/gpt2"}},
      {gpt2_like("gpt2-medium", 24, 16, 1024), {"openai-community/gpt2-medium"}},
      {gpt2_like("gpt2-large", 36, 20, 1280), {"openai-community/gpt2-large"}},
      {gpt2_like("gpt2-xl", 48, 25, 1600), {"openai-community/gpt2-xl"}},
      {opt_1_3b(), {"opt-1.3b"}},
      {llama_like("meta-llama/Llama-2-7b-hf", 32, 32, 32, 4096, 11008, 32000, 4096, false, 10000.0), {"llama-2-7b"}},
      {llama_like("meta-llama/Llama-2-13b-hf", 40, 40, 40, 5120, 13824, 32000, 4096, false, 10000.0), {"llama-2-13b"}},
      {llama_like("meta-llama/Llama-2-70b-hf", 80, 64, 8, 8192, 28672, 32000, 4096, false, 10000.0), {"llama-2-70b"}},
      {llama_3_2_1b(), {"llama-3.2-1b"}},
      {mistral_7b_v0_3("mistralai/Mistral-7B-v0.3"), {"mistral-7b"}},
      {mistral_7b_v0_3("mistralai/Mistral-7B-Instruct-v0.3"), {"mistral-7b-instruct"}},
      {gemma_3_1b("google/gemma-3-1b-pt"), {"gemma-3-1b", "gemma-3-1b-pt"}},
      {gemma_3_1b("google/gemma-3-1b-it"), {"gemma-3-1b-it"}},
      {gpt2_tiny(), {}},
      {llama_tiny(), {}},
      {gemma3_tiny(), {}},
  };
  return entries;
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return out;
}

std::string known_names_text() {
  return cat("known models: ", join(known_model_names(), ", "),
             "; or give a path to a Hugging Face config.json or a folder that holds one");
}

}  // namespace

std::vector<std::string> known_model_names() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.push_back(entry.config.name);
  return names;
}

TransformerConfig resolve_model(std::string_view name_or_path) {
  const std::string key = lowercase(name_or_path);
  for (const auto& entry : registry()) {
    bool match = lowercase(entry.config.name) == key;
    for (const auto& alias : entry.aliases) match = match || lowercase(alias) == key;
    if (match) {
      entry.config.validate();
      return entry.config;
    }
  }
  std::filesystem::path path(name_or_path);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) path /= "config.json";
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw UsageError(cat("--model: unknown model '", name_or_path, "' (", known_names_text(), ")"));
  }
  try {
    return config_from_hf_file(path.string());
  } catch (const Error& e) {
    throw UsageError(cat("--model: ", e.what(), " (", known_names_text(), ")"));
  }
}

}  // namespace zb
