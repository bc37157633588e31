// Named configurations, Hugging Face config.json reading, and the published parameter counts.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "models/hf_config.h"
#include "models/model_registry.h"

namespace zb {
namespace {

struct Published {
  const char* name;
  int64_t parameters;  // as Hugging Face's num_parameters() reports for the released checkpoints
};

class PublishedCount : public ::testing::TestWithParam<Published> {};

TEST_P(PublishedCount, MatchesTheReleasedModel) {
  EXPECT_EQ(parameter_count(resolve_model(GetParam().name)), GetParam().parameters);
}

INSTANTIATE_TEST_SUITE_P(NamedModels, PublishedCount,
                         ::testing::Values(Published{"gpt2", 124439808}, Published{"gpt2-medium", 354823168},
                                           Published{"gpt2-large", 774030080}, Published{"gpt2-xl", 1557611200},
                                           Published{"facebook/opt-1.3b", 1315758080},
                                           Published{"meta-llama/Llama-2-7b-hf", 6738415616},
                                           Published{"meta-llama/Llama-2-13b-hf", 13015864320},
                                           Published{"meta-llama/Llama-2-70b-hf", 68976648192},
                                           Published{"meta-llama/Llama-3.2-1B", 1235814400},
                                           Published{"mistralai/Mistral-7B-v0.3", 7248023552},
                                           Published{"mistralai/Mistral-7B-Instruct-v0.3", 7248023552}),
                         [](const auto& param_info) {
                           std::string n = param_info.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(ModelRegistry, AliasesAndCaseResolveToTheSameModel) {
  EXPECT_EQ(resolve_model("openai-community/gpt2-xl").name, "gpt2-xl");
  EXPECT_EQ(resolve_model("meta-llama/llama-2-7b-hf").name, "meta-llama/Llama-2-7b-hf");
  EXPECT_EQ(resolve_model("llama-3.2-1b").name, "meta-llama/Llama-3.2-1B");
  EXPECT_EQ(resolve_model("opt-1.3b").name, "facebook/opt-1.3b");
  EXPECT_EQ(resolve_model("mistral-7b").name, "mistralai/Mistral-7B-v0.3");
  EXPECT_EQ(resolve_model("MISTRALAI/mistral-7b-instruct-v0.3").name, "mistralai/Mistral-7B-Instruct-v0.3");
}

TEST(ModelRegistry, FamiliesHaveTheirArchitecture) {
  const auto gpt2 = resolve_model("gpt2");
  EXPECT_EQ(gpt2.norm, NormKind::layernorm);
  EXPECT_EQ(gpt2.mlp, MlpKind::gelu);
  EXPECT_TRUE(gpt2.bias && gpt2.tied_embeddings && gpt2.has_learned_positions());
  const auto opt = resolve_model("facebook/opt-1.3b");
  EXPECT_EQ(opt.mlp, MlpKind::relu);
  EXPECT_EQ(opt.position_offset, 2);
  const auto llama = resolve_model("meta-llama/Llama-2-70b-hf");
  EXPECT_EQ(llama.norm, NormKind::rmsnorm);
  EXPECT_EQ(llama.mlp, MlpKind::swiglu);
  EXPECT_EQ(llama.n_kv_head, 8);
  EXPECT_FALSE(llama.bias || llama.tied_embeddings || llama.has_learned_positions());
  const auto tiny = resolve_model("llama-tiny");
  EXPECT_GE(tiny.vocab_size, 256);
  EXPECT_LT(tiny.n_kv_head, tiny.n_head) << "llama-tiny exercises grouped-query attention";
}

TEST(ModelRegistry, UnknownNameListsEveryKnownName) {
  try {
    resolve_model("gpt5-ultra");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("gpt5-ultra"), std::string::npos);
    for (const auto& name : known_model_names()) EXPECT_NE(message.find(name), std::string::npos) << name;
  }
}

class HfConfigFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = std::filesystem::temp_directory_path() /
          ("zb_hf_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  }
  std::filesystem::path dir;
};

// The released config.json files, abridged to the fields that matter.
const char* kGpt2Config = R"({"model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257,
  "n_positions": 1024, "n_inner": null, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05})";
const char* kOptConfig = R"({"model_type": "opt", "_name_or_path": "facebook/opt-1.3b", "num_hidden_layers": 24,
  "num_attention_heads": 32, "hidden_size": 2048, "ffn_dim": 8192, "vocab_size": 50272, "max_position_embeddings": 2048,
  "word_embed_proj_dim": 2048, "do_layer_norm_before": true, "activation_function": "relu", "enable_bias": true})";
const char* kLlama32Config = R"({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
  "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": true,
  "hidden_act": "silu", "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
  "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";

TEST_F(HfConfigFiles, ReleasedConfigsGiveThePublishedCounts) {
  EXPECT_EQ(parameter_count(resolve_model(write("gpt2.json", kGpt2Config))), 124439808);
  const auto opt = resolve_model(write("opt.json", kOptConfig));
  EXPECT_EQ(parameter_count(opt), 1315758080);
  EXPECT_EQ(opt.name, "facebook/opt-1.3b") << "the name comes from _name_or_path";
  const auto llama = resolve_model(write("llama.json", kLlama32Config));
  EXPECT_EQ(parameter_count(llama), 1235814400);
  ASSERT_TRUE(llama.rope_scaling.has_value());
  EXPECT_EQ(llama.rope_scaling->factor, 32.0);
  EXPECT_EQ(llama.rope_theta, 500000.0);
}

// Mistral's released files, abridged: v0.3 (no sliding window; as the named model) and v0.1 (a window of 4096).
const char* kMistral03Config = R"({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32768,
  "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
  "tie_word_embeddings": false, "hidden_act": "silu", "attention_dropout": 0.0})";
const char* kMistral01Config = R"({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
  "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
  "tie_word_embeddings": false, "hidden_act": "silu"})";

TEST_F(HfConfigFiles, MistralIsLlamasBlockWithItsSlidingWindow) {
  const TransformerConfig v03 = resolve_model(write("mistral03.json", kMistral03Config));
  const TransformerConfig named = resolve_model("mistralai/Mistral-7B-v0.3");
  EXPECT_EQ(parameter_count(v03), 7248023552);
  EXPECT_EQ(v03.norm, NormKind::rmsnorm);
  EXPECT_EQ(v03.mlp, MlpKind::swiglu);
  EXPECT_EQ(v03.position, PositionKind::rotary);
  EXPECT_EQ(v03.n_kv_head, 8);
  EXPECT_EQ(v03.head_dim, 128);
  EXPECT_EQ(v03.rope_theta, 1e6);
  EXPECT_EQ(v03.max_seq_len, named.max_seq_len);
  EXPECT_EQ(v03.norm_eps, named.norm_eps);
  EXPECT_FALSE(v03.sliding_window.has_value()) << "null: plain causal attention";

  const TransformerConfig v01 = resolve_model(write("mistral01.json", kMistral01Config));
  EXPECT_EQ(parameter_count(v01), 7241732096);
  ASSERT_TRUE(v01.sliding_window.has_value());
  EXPECT_EQ(*v01.sliding_window, 4096);
  // Up to the window every query sees every earlier position, as without one; beyond it, a band of keys.
  EXPECT_FALSE(needs_banded_attention(v01, 4096));
  EXPECT_TRUE(needs_banded_attention(v01, 4097));
  EXPECT_FALSE(needs_banded_attention(v03, 32768));
  EXPECT_EQ(sequence_length_problem(v01, 32768), "");
  // Attention's work a token spans the window's keys, not the sequence's, beyond the window.
  const double weights = 6.0 * double(parameter_count(v01)), attention = 12.0 * 32 * 4096;
  EXPECT_DOUBLE_EQ(training_flops_per_token(v01, 2048), weights + attention * 2048);
  EXPECT_DOUBLE_EQ(training_flops_per_token(v01, 8192), weights + attention * 4096);
  EXPECT_NE(sequence_length_problem(v01, 40000).find("maximum of 32768"), std::string::npos);
  // A mistral file is read as the llama file of the same fields would be.
  std::string as_llama = kMistral01Config;
  as_llama.replace(as_llama.find("mistral"), 7, "llama");
  TransformerConfig llama = resolve_model(write("llama.json", as_llama));
  EXPECT_EQ(parameter_count(llama), parameter_count(v01));
  llama.name = v01.name;
  EXPECT_EQ(describe(llama) + ", sliding window 4096", describe(v01));
  // Absent, the window is MistralConfig's default, 4096 (null is none); so are 8 key/value heads.
  std::string absent = kMistral01Config;
  absent.erase(absent.find(R"("sliding_window": 4096,)"), std::string(R"("sliding_window": 4096,)").size());
  absent.erase(absent.find(R"("num_key_value_heads": 8,)"), std::string(R"("num_key_value_heads": 8,)").size());
  const TransformerConfig defaults = resolve_model(write("mistral_defaults.json", absent));
  EXPECT_EQ(defaults.sliding_window, std::optional<int64_t>(4096));
  EXPECT_EQ(defaults.n_kv_head, 8);
  std::string dropout = kMistral03Config;
  dropout.replace(dropout.find(R"("attention_dropout": 0.0)"), std::string(R"("attention_dropout": 0.0)").size(),
                  R"("attention_dropout": 0.1)");
  try {
    resolve_model(write("dropout.json", dropout));
    ADD_FAILURE() << "attention dropout accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("attention_dropout"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_model(write("bad_window.json", R"({"model_type": "mistral", "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256,
      "sliding_window": 0})")),
               UsageError);
}

TEST_F(HfConfigFiles, AFolderHoldingConfigJsonWorks) {
  write("config.json", kGpt2Config);
  EXPECT_EQ(resolve_model(dir.string()).n_layer, 12);
}

TEST_F(HfConfigFiles, MalformedOrUnsupportedFilesAreClearErrors) {
  auto message_of = [&](const std::string& text) -> std::string {
    try {
      resolve_model(write("bad.json", text));
    } catch (const UsageError& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string broken = message_of("{\"model_type\": \"gpt2\", ");
  EXPECT_NE(broken.find("not a valid config.json"), std::string::npos) << broken;
  EXPECT_NE(broken.find("gpt2-tiny"), std::string::npos) << "lists the known names: " << broken;
  EXPECT_NE(message_of(R"({"model_type": "gpt2", "n_head": 12})").find("'n_layer'"), std::string::npos);
  EXPECT_NE(message_of(R"({"model_type": "bert"})").find("not supported"), std::string::npos);
  EXPECT_NE(message_of(R"({"model_type": "gpt2", "n_layer": "twelve", "n_head": 12, "n_embd": 768, "vocab_size": 5})")
                .find("must be an integer"),
            std::string::npos);
  EXPECT_NE(message_of(R"({"model_type": "llama", "hidden_size": 96, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 6, "num_key_value_heads": 4, "vocab_size": 256})")
                .find("multiple of key/value heads"),
            std::string::npos);
  const std::string llama = R"("model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256)";
  EXPECT_NE(message_of("{" + llama + R"(, "rope_scaling": {"rope_type": "llama3", "factor": 0, "low_freq_factor": 1,
      "high_freq_factor": 4, "original_max_position_embeddings": 32}})").find("llama3 rope scaling needs"),
            std::string::npos);
  EXPECT_NE(message_of("{" + llama + R"(, "rope_scaling": "yes"})").find("must be an object"), std::string::npos);
  // Without head_dim the heads must split the width; with it, attention may be narrower or wider than the width.
  EXPECT_NE(message_of("{" + llama + R"(, "hidden_size": 100, "num_attention_heads": 6})")
                .find("the width 100 does not split evenly over 6 heads"),
            std::string::npos);
  EXPECT_EQ(message_of("{" + llama + R"(, "hidden_size": 100, "num_attention_heads": 6, "head_dim": 16})"),
            "no error");
  EXPECT_NE(message_of("{" + llama + R"(, "vocab_size": 9223372036854775807})").find("vocabulary size"),
            std::string::npos);
  const std::string gpt2 = R"("model_type": "gpt2", "n_layer": 2, "n_head": 6, "vocab_size": 256)";
  EXPECT_NE(message_of("{" + gpt2 + R"(, "n_embd": 100})").find("does not split evenly over 6 heads"), std::string::npos);
  EXPECT_NE(message_of("{" + gpt2 + R"(, "n_embd": 96, "scale_attn_weights": false})").find("scale_attn_weights"),
            std::string::npos);
  EXPECT_NE(message_of("{" + gpt2 + R"(, "n_embd": 96, "n_positions": 9223372036854775807})").find("sequence length"),
            std::string::npos);
}

TEST(ModelRegistry, OddHeadSizesAreFineWithoutRotaryEmbeddings) {
  TransformerConfig c = resolve_model("gpt2-tiny");
  c.d_model = 75;
  c.n_head = c.n_kv_head = 3;
  c.head_dim = 25;
  EXPECT_NO_THROW(c.validate());
  c.position = PositionKind::rotary;
  EXPECT_THROW(c.validate(), Error);
}

}  // namespace
}  // namespace zb
