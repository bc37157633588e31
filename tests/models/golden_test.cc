// The CPU backend against Hugging Face: the golden files written by tests/reference/make_golden.py hold, for tiny
// GPT-2, OPT, Llama (grouped-query attention), Llama 3 (scaled RoPE, tied embeddings), Mistral (a sliding window of
// half the sequence) and Gemma 3 (local and global layers, q/k norms, post-norms, GeGLU) models built with Hugging
// Face's own classes in float64: the weights, the logits, the loss and every gradient for one batch, and three
// optimizer steps with gradient clipping. Our fp32 forward/backward must agree to 1e-5 relative error. (golden_gpu_test holds the CUDA backend to the same files.)
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "core/tracking_allocator.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/hf_config.h"
#include "models/model_registry.h"
#include "support/golden_files.h"
#include "support/safetensors.h"
#include "support/tensor_views.h"

namespace zb {
namespace {

using test::golden_config;
using test::golden_path;
using test::relative_error;
using test::SafetensorsFile;

constexpr double kTolerance = 1e-5;

// Copies the file's "<prefix><unit>/<tensor>" values into the store's parameters; the file must hold nothing the
// layout lacks.
void load_weights(const SafetensorsFile& f, const std::string& prefix, ParameterStore& store, Backend& backend) {
  const ParameterLayout& layout = store.layout();
  for (size_t u = 0; u < layout.units().size(); ++u) {
    Tensor flat = store.params(u);
    std::vector<float> values = test::golden_unit_values(
        f, prefix, layout, u, std::vector<float>(flat.as<float>(), flat.as<float>() + flat.numel()));
    backend.copy(test::view(values, Shape{flat.numel()}), flat);
  }
  for (const std::string& name : test::golden_tensors_outside(f, prefix, layout)) {
    ADD_FAILURE() << name << " has no place in the layout";
  }
}

// The elements of one tensor of a unit buffer, as doubles.
std::vector<double> read_tensor(const Tensor& flat, const ParameterTensor& t) {
  const float* p = flat.as<float>() + t.offset;
  return std::vector<double>(p, p + t.numel());
}

class Golden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(golden_path(GetParam())))
        << golden_path(GetParam()) << " is missing: run tests/reference/make_golden.py where PyTorch is installed";
    file = std::make_unique<SafetensorsFile>(golden_path(GetParam()));
    config = golden_config(*file);
    batch = std::stoll(file->metadata().at("batch").get<std::string>());
    seq = std::stoll(file->metadata().at("seq").get<std::string>());
  }

  std::unique_ptr<SafetensorsFile> file;
  TransformerConfig config;
  int64_t batch = 0, seq = 0;
  CpuBackend backend;
  TrackingAllocator allocator{std::make_unique<HostMemory>()};
};

TEST_P(Golden, LogitsLossAndGradientsMatchHuggingFace) {
  ParameterLayout layout(config);
  ParameterStore store(layout, allocator, DType::f32, OptimizerStateFormat{});
  store.initialize(backend, 7);
  load_weights(*file, "params/", store, backend);
  Transformer model(layout, backend, allocator, DType::f32, batch, seq);
  model.bind_parameters(bind_model_tensors(layout, store.all_params()));
  model.bind_gradients(bind_model_tensors(layout, store.all_grads()));

  test::GoldenTokens tokens(file->at("tokens").to_ints(), batch, seq);
  TokenBatch b = tokens.next_batch();
  // The logits of a forward alone (the backward overwrites them with their gradient).
  model.forward(test::view(b.inputs), test::view(b.targets));
  const Tensor& logits = model.activations().logits;
  const std::vector<float> padded(logits.as<float>(), logits.as<float>() + logits.numel());
  EXPECT_LE(relative_error(test::vocabulary_columns(padded, batch * seq, config.vocab_size),
                           file->at("logits").to_doubles()),
            kTolerance)
      << "logits";
  const double loss = model.forward_backward(test::view(b.inputs), test::view(b.targets));
  const double expected = std::stod(file->metadata().at("loss").get<std::string>());
  EXPECT_LE(std::abs(loss - expected) / expected, kTolerance) << "loss " << loss << " vs Hugging Face " << expected;

  for (size_t u = 0; u < layout.units().size(); ++u) {
    for (const ParameterTensor& t : layout.unit(u).tensors) {
      const std::string name = layout.unit(u).name + "/" + t.name;
      const auto expected_grad = file->at("grads/" + name).to_doubles();
      EXPECT_LE(relative_error(read_tensor(store.grads(u), t), expected_grad), kTolerance) << "gradient of " << name;
    }
  }
}

TEST_P(Golden, OptimizerStepsWithClippingMatchPyTorch) {
  const auto spec = nlohmann::json::parse(file->metadata().at("optimizer").get<std::string>());
  TrainingOptions options;
  options.model = config;
  options.batch = batch;
  options.seq = seq;
  options.optimizer.kind = parse_optimizer_kind(spec.at("kind").get<std::string>());
  options.optimizer.lr = spec.at("lr").get<float>();
  options.optimizer.beta1 = spec.at("betas")[0].get<float>();
  options.optimizer.beta2 = spec.at("betas")[1].get<float>();
  options.optimizer.eps = spec.value("eps", 1e-8f);
  options.optimizer.weight_decay = spec.at("weight_decay").get<float>();
  options.optimizer.momentum = spec.value("momentum", 0.0f);
  options.grad_clip = spec.at("grad_clip").get<float>();
  test::GoldenTokens tokens(file->at("tokens").to_ints(), batch, seq);
  Trainer trainer(options, backend, allocator, tokens);
  load_weights(*file, "params/", trainer.store(), backend);

  const auto losses = file->at("losses").to_doubles();
  const auto norms = file->at("grad_norms").to_doubles();
  for (size_t s = 0; s < losses.size(); ++s) {
    const StepStats stats = trainer.step();
    EXPECT_LE(std::abs(stats.loss - losses[s]) / losses[s], kTolerance) << "loss at step " << s + 1;
    EXPECT_LE(std::abs(stats.grad_norm - norms[s]) / norms[s], kTolerance) << "gradient norm at step " << s + 1;
  }
  // The change each step made, compared as a whole: this is what the optimizer's semantics decide.
  const ParameterLayout& layout = trainer.layout();
  std::vector<double> ours, theirs;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    for (const ParameterTensor& t : layout.unit(u).tensors) {
      const std::string name = layout.unit(u).name + "/" + t.name;
      const auto initial = file->at("params/" + name).to_doubles();
      const auto final_theirs = file->at("final/" + name).to_doubles();
      const auto final_ours = read_tensor(trainer.store().params(u), t);
      for (size_t i = 0; i < initial.size(); ++i) {
        ours.push_back(final_ours[i] - initial[i]);
        theirs.push_back(final_theirs[i] - initial[i]);
      }
    }
  }
  EXPECT_LE(relative_error(ours, theirs), 1e-4) << "parameter change over " << losses.size() << " steps";
}

INSTANTIATE_TEST_SUITE_P(TinyModels, Golden,
                         ::testing::Values("gpt2-tiny", "opt-tiny", "llama-tiny", "llama3-tiny", "mistral-tiny",
                                           "gemma3-tiny"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The named tiny configs are the ones the golden files were made with.
TEST(GoldenConfigs, NamedTinyModelsAreTheGoldenArchitectures) {
  for (const std::string name : {"gpt2-tiny", "llama-tiny"}) {
    if (!std::filesystem::exists(golden_path(name))) GTEST_FAIL() << golden_path(name) << " is missing";
    const TransformerConfig golden = golden_config(SafetensorsFile(golden_path(name)));
    const TransformerConfig named = resolve_model(name);
    EXPECT_EQ(parameter_count(golden), parameter_count(named)) << name;
    EXPECT_EQ(describe(golden), describe(named)) << name;
    EXPECT_EQ(golden.norm_eps, named.norm_eps) << name;
    EXPECT_EQ(golden.rope_theta, named.rope_theta) << name;
  }
}

}  // namespace
}  // namespace zb
