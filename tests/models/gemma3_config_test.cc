// Gemma 3's configurations: the named 1B models and their published parameter count, config.json files of
// model_type gemma3_text (older and newer field layouts) and gemma3 (the multimodal wrapper's text_config), the
// fields refused by name, and what the per-layer windows do to FLOP counts and the GPU's refusals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "models/hf_config.h"
#include "models/model_registry.h"

namespace zb {
namespace {

using nlohmann::json;

// google/gemma-3-1b-it's config.json as released (its -pt twin differs in eos_token_id alone).
const char* kGemma31bConfig = R"({"architectures": ["Gemma3ForCausalLM"], "attention_bias": false,
  "attention_dropout": 0.0, "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
  "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 1152, "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
  "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
  "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
  "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144})";

TransformerConfig read(const json& j) {
  return config_from_hf_json(j, "test");
}

// Hugging Face's num_parameters() of Gemma3ForCausalLM: 262144 x 1152 embeddings (the head tied to them), 26
// blocks of 2,949,120 attention, 23,887,872 MLP and 5,120 norm weights, and the final norm's 1,152.
TEST(Gemma3Config, NamedModelsAreTheReleasedOnes) {
  for (const char* name : {"google/gemma-3-1b-pt", "google/gemma-3-1b-it"}) {
    SCOPED_TRACE(name);
    const TransformerConfig named = resolve_model(name);
    EXPECT_EQ(parameter_count(named), 999885952);
    TransformerConfig file = read(json::parse(kGemma31bConfig));
    file.name = named.name;
    EXPECT_EQ(describe(file), describe(named));
    EXPECT_EQ(file.layer_attention, named.layer_attention);
  }
  EXPECT_EQ(resolve_model("gemma-3-1b").name, "google/gemma-3-1b-pt");
  EXPECT_EQ(resolve_model("GEMMA-3-1B-IT").name, "google/gemma-3-1b-it");
}

TEST(Gemma3Config, TheReleasedFileReadsAsGemma3sBlock) {
  const TransformerConfig c = read(json::parse(kGemma31bConfig));
  EXPECT_EQ(c.norm, NormKind::rmsnorm);
  EXPECT_EQ(c.norm_gain_offset, 1.0) << "Gemma3RMSNorm scales by 1 + w";
  EXPECT_EQ(c.mlp, MlpKind::geglu);
  EXPECT_TRUE(c.qk_norm && c.post_norms && c.scale_embeddings && c.tied_embeddings);
  EXPECT_FALSE(c.bias);
  EXPECT_EQ(c.d_model, 1152);
  EXPECT_EQ(c.head_dim, 256) << "not hidden_size / heads (288)";
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_kv_head, 1);
  EXPECT_EQ(c.d_ff, 6912);
  EXPECT_EQ(c.vocab_size, 262144);
  EXPECT_EQ(c.max_seq_len, 32768);
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.local_rope_theta, std::optional<double>(1e4));
  EXPECT_EQ(c.rope_linear_factor, 1.0);
  EXPECT_EQ(c.sliding_window, std::optional<int64_t>(512));
  EXPECT_EQ(c.query_pre_attn_scalar, std::optional<double>(256));
  EXPECT_EQ(c.attention_softmax_scale(), 0.0) << "256^-0.5 is head_dim's own scale";
  // Layer i is global where i + 1 is a multiple of the pattern: 5, 11, 17 and 23 of 26.
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const bool global = l == 5 || l == 11 || l == 17 || l == 23;
    EXPECT_EQ(c.sliding_layer(l), !global) << "layer " << l;
    EXPECT_EQ(c.layer_window(l), global ? 0 : 512) << "layer " << l;
    EXPECT_EQ(c.local_rope_layer(l), !global) << "layer " << l;
  }
  // Up to the window every layer is plain causal attention; beyond it the local layers band.
  EXPECT_FALSE(needs_banded_attention(c, 512));
  EXPECT_TRUE(needs_banded_attention(c, 513));
  // Attention's work a token: the 22 local layers span their 512 keys, the 4 global ones the sequence.
  const double weights = 6.0 * double(parameter_count(c)), width = double(c.attention_width());
  EXPECT_DOUBLE_EQ(training_flops_per_token(c, 4096), weights + 12.0 * width * (22 * 512 + 4 * 4096));
  EXPECT_DOUBLE_EQ(training_flops_per_token(c, 256), weights + 12.0 * width * 26 * 256);
}

// Newer files list the layers' types and give each type its rotary parameters; they read as the older layout.
TEST(Gemma3Config, LayerTypesAndPerTypeRopeParametersReadAsThePattern) {
  const TransformerConfig older = read(json::parse(kGemma31bConfig));
  json newer = json::parse(kGemma31bConfig);
  for (const char* key : {"rope_theta", "rope_local_base_freq", "rope_scaling", "sliding_window_pattern"}) {
    newer.erase(key);
  }
  newer["layer_types"] = json::array();
  for (int64_t l = 0; l < 26; ++l) newer["layer_types"].push_back((l + 1) % 6 ? "sliding_attention" : "full_attention");
  newer["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                              {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  newer["use_bidirectional_attention"] = false;
  const TransformerConfig c = read(newer);
  for (int64_t l = 0; l < c.n_layer; ++l) EXPECT_EQ(c.sliding_layer(l), older.sliding_layer(l)) << "layer " << l;
  EXPECT_EQ(c.rope_theta, older.rope_theta);
  EXPECT_EQ(c.local_rope_theta, older.local_rope_theta);
  EXPECT_EQ(describe(c), describe(older));
  // A list that is not the pattern is followed as it is.
  newer["layer_types"][0] = "full_attention";
  EXPECT_FALSE(read(newer).sliding_layer(0));
  newer["rope_parameters"]["full_attention"] = {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}};
  EXPECT_EQ(read(newer).rope_linear_factor, 8.0);
}

// google/gemma-3-4b-it's config.json, abridged: the multimodal wrapper whose text_config leaves most fields to
// Gemma3TextConfig's defaults (8 heads, 4 key/value heads of 256, a vocabulary of 262208), with the full layers'
// rotary scaled linearly by 8; and the 27B's text_config, whose attention scale is 168^-0.5 against head_dim 128.
const char* kGemma34bConfig = R"({"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
  "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02,
  "mm_tokens_per_image": 256, "model_type": "gemma3", "text_config": {"hidden_size": 2560,
  "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
  "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
  "torch_dtype": "bfloat16", "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
  "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14}})";

TEST(Gemma3Config, TheMultimodalWrapperGivesItsTextModel) {
  const TransformerConfig c = read(json::parse(kGemma34bConfig));
  EXPECT_EQ(c.n_layer, 34);
  EXPECT_EQ(c.d_model, 2560);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_kv_head, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.vocab_size, 262208);
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_EQ(c.sliding_window, std::optional<int64_t>(1024));
  EXPECT_EQ(c.rope_linear_factor, 8.0) << "the full layers' rotary";
  EXPECT_EQ(c.local_rope_theta, std::optional<double>(1e4)) << "the local layers' own, unscaled";
  int64_t global = 0;
  for (int64_t l = 0; l < c.n_layer; ++l) global += !c.sliding_layer(l);
  EXPECT_EQ(global, 5);
  // The same fields as a gemma3_text file: the same model.
  json text = json::parse(kGemma34bConfig)["text_config"];
  TransformerConfig direct = read(text);
  EXPECT_EQ(describe(direct), describe(c));
  EXPECT_EQ(parameter_count(direct), parameter_count(c));

  json big = json::parse(kGemma34bConfig);
  big["text_config"].update(json::parse(R"({"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504,
      "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16, "query_pre_attn_scalar": 168})"));
  const TransformerConfig c27 = read(big);
  EXPECT_DOUBLE_EQ(c27.attention_softmax_scale(), 1 / std::sqrt(168.0)) << "not head_dim's 128^-0.5";
  EXPECT_EQ(sequence_length_problem(c27, 16), "");
}

// Every field that would make the model compute something else is refused, naming the field.
TEST(Gemma3Config, FieldsItCannotHonourAreRefusedByName) {
  auto refusal = [](const json& j) -> std::string {
    try {
      read(j);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  const json base = json::parse(kGemma31bConfig);
  const std::vector<std::pair<std::string, std::string>> changes = {
      {R"({"final_logit_softcapping": 30.0})", "final_logit_softcapping"},
      {R"({"attn_logit_softcapping": 50.0})", "attn_logit_softcapping"},
      {R"({"attention_bias": true})", "attention_bias"},
      {R"({"attention_dropout": 0.1})", "attention_dropout"},
      {R"({"hidden_activation": "gelu"})", "hidden_activation"},
      {R"({"use_bidirectional_attention": true})", "use_bidirectional_attention"},
      {R"({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})", "rope_type 'yarn'"},
      {R"({"rope_scaling": {"rope_type": "linear"}})", "'rope_scaling.factor'"},
      {R"({"sliding_window": null})", "sliding_window null"},
      {R"({"sliding_window_pattern": 0})", "sliding_window_pattern"},
      {R"({"layer_types": ["sliding_attention", "full_attention"]})", "layer_types lists 2 layers"},
      {R"({"rope_parameters": {"full_attention": {"rope_type": "default"}}})", "rope_parameters"},
      {R"({"rope_parameters": {"full_attention": {"rope_type": "default"},
          "sliding_attention": {"rope_type": "linear", "factor": 2.0}}})",
       "rope_parameters.sliding_attention"},
  };
  for (const auto& [change, field] : changes) {
    json j = base;
    j.update(json::parse(change));
    const std::string message = refusal(j);
    EXPECT_NE(message.find(field), std::string::npos) << change << ": " << message;
  }
  json chunked = base;
  chunked["layer_types"] = json::array();
  for (int l = 0; l < 26; ++l) chunked["layer_types"].push_back(l == 3 ? "chunked_attention" : "full_attention");
  EXPECT_NE(refusal(chunked).find("chunked_attention"), std::string::npos) << refusal(chunked);

  const json wrapper = json::parse(kGemma34bConfig);
  json capped = wrapper;
  capped["text_config"]["final_logit_softcapping"] = 30.0;
  EXPECT_NE(refusal(capped).find("text_config.final_logit_softcapping"), std::string::npos) << refusal(capped);
  json untied = wrapper;
  untied["tie_word_embeddings"] = false;
  EXPECT_NE(refusal(untied).find("tie_word_embeddings"), std::string::npos) << refusal(untied);
  json other = wrapper;
  other["text_config"]["model_type"] = "gemma2";
  EXPECT_NE(refusal(other).find("text_config.model_type"), std::string::npos) << refusal(other);
}

// The tiny model the CPU tests train: both layer types, a window of half their 16 tokens.
TEST(Gemma3Config, TinyModelHasBothLayerTypesAndABand) {
  const TransformerConfig c = resolve_model("gemma3-tiny");
  EXPECT_TRUE(c.sliding_layer(0));
  EXPECT_FALSE(c.sliding_layer(1));
  EXPECT_TRUE(needs_banded_attention(c, 16));
  EXPECT_NE(c.head_dim * c.n_head, c.d_model);
  const double weights = 6.0 * double(parameter_count(c)), width = double(c.attention_width());
  EXPECT_DOUBLE_EQ(training_flops_per_token(c, 16), weights + 12.0 * width * (8 + 16));
}

}  // namespace
}  // namespace zb
