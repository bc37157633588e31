// The CUDA backend against Hugging Face's model classes: the golden files of tests/reference/make_golden.py (tiny
// GPT-2, OPT, Llama, Llama 3, Mistral and Gemma 3 in float64) loaded into the GPU's store, one batch's logits, loss
// and every parameter's gradient compared. fp32 within 2e-5 (the CPU's 1e-5 to the files plus the GPU's 1e-5 to the CPU in
// cuda_training_test); bf16 and fp16 within the bounds cuda_training_test holds the GPU's 16-bit passes to against
// the CPU (the weights rounded to the dtype first). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>

#include "engine/trainer.h"
#include "support/cuda_fixture.h"
#include "support/golden_files.h"

namespace zb {
namespace {

using test::relative_error;
using test::SafetensorsFile;

struct Bounds {
  double loss, gradient;
};

Bounds bounds_of(DType dtype) {
  switch (dtype) {
    case DType::bf16: return {2e-2, 5e-2};
    case DType::f16: return {5e-3, 1.25e-2};
    default: return {2e-5, 2e-5};
  }
}

class GoldenOnGpu : public ::testing::TestWithParam<std::tuple<std::string, DType>>, protected test::CudaFixture {
 protected:
  void SetUp() override {
    if (!start()) GTEST_SKIP() << "no CUDA GPU";
    file = std::make_unique<SafetensorsFile>(test::golden_path(std::get<0>(GetParam())));
    config = test::golden_config(*file);
    batch = std::stoll(file->metadata().at("batch").get<std::string>());
    seq = std::stoll(file->metadata().at("seq").get<std::string>());
  }

  std::unique_ptr<SafetensorsFile> file;
  TransformerConfig config;
  int64_t batch = 0, seq = 0;
};

TEST_P(GoldenOnGpu, LogitsLossAndGradientsMatchHuggingFace) {
  const DType dtype = std::get<1>(GetParam());
  const Bounds bounds = bounds_of(dtype);
  const ParameterLayout layout(config);
  ParameterStore store(layout, *allocator, dtype, OptimizerStateFormat{});
  store.initialize(*gpu, 7);
  for (size_t u = 0; u < layout.units().size(); ++u) {
    Tensor flat = store.params(u);
    const std::vector<float> values = test::golden_unit_values(*file, "params/", layout, u, download(flat));
    gpu->copy(upload(values, Shape{flat.numel()}, dtype), flat);
  }
  EXPECT_TRUE(test::golden_tensors_outside(*file, "params/", layout).empty());
  Transformer model(layout, *gpu, *allocator, dtype, batch, seq);
  model.bind_parameters(bind_model_tensors(layout, store.all_params()));
  model.bind_gradients(bind_model_tensors(layout, store.all_grads()));

  test::GoldenTokens tokens(file->at("tokens").to_ints(), batch, seq);
  const TokenBatch b = tokens.next_batch();
  const Tensor inputs = upload_ids(b.inputs), targets = upload_ids(b.targets);
  // The logits of a forward alone (the backward overwrites them with their gradient), within the gradients' bound.
  model.forward(inputs, targets);
  EXPECT_LE(relative_error(test::vocabulary_columns(download(model.activations().logits), batch * seq,
                                                    config.vocab_size),
                           file->at("logits").to_doubles()),
            bounds.gradient)
      << "logits";
  const double loss = model.forward_backward(inputs, targets);
  const double expected = std::stod(file->metadata().at("loss").get<std::string>());
  EXPECT_LE(std::abs(loss - expected) / expected, bounds.loss) << "loss " << loss << " vs Hugging Face " << expected;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const std::vector<float> grads = download(store.grads(u));
    for (const ParameterTensor& t : layout.unit(u).tensors) {
      const std::string name = layout.unit(u).name + "/" + t.name;
      const std::vector<float> ours(grads.begin() + t.offset, grads.begin() + t.offset + t.numel());
      const std::vector<double> theirs = file->at("grads/" + name).to_doubles();
      EXPECT_LE(relative_error(ours, theirs), bounds.gradient) << "gradient of " << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    TinyModels, GoldenOnGpu,
    ::testing::Combine(::testing::Values("gpt2-tiny", "opt-tiny", "llama-tiny", "llama3-tiny", "mistral-tiny",
                                         "gemma3-tiny"),
                       ::testing::Values(DType::f32, DType::bf16, DType::f16)),
    [](const auto& param_info) {
      std::string name = std::get<0>(param_info.param) + "_" + std::string(dtype_name(std::get<1>(param_info.param)));
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

}  // namespace
}  // namespace zb
