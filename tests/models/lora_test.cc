// LoRA on the CPU backend in fp64: the layout of adapters beside frozen units, the adapters' gradients against
// finite differences and against the model with each adapter merged into its weight (W + s B A), and the
// frozen weights' gradients left uncomputed.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/tracking_allocator.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/model_registry.h"
#include "models/transformer.h"
#include "support/gradient_check.h"
#include "support/host_model.h"
#include "support/random_inputs.h"
#include "support/tensor_views.h"

namespace zb {
namespace {

TransformerConfig with_lora(const char* model, LoraTargets targets, int64_t rank = 3, double alpha = 5.0,
                            double dropout = 0.0) {
  TransformerConfig c = resolve_model(model);
  c.lora = {rank, alpha, targets, dropout};
  return c;
}

TEST(LoraLayout, AdapterUnitsFollowTheirBlocksAndAloneAreTrained) {
  for (LoraTargets targets : {LoraTargets::attention, LoraTargets::mlp, LoraTargets::all}) {
    SCOPED_TRACE(lora_targets_name(targets));
    const TransformerConfig c = with_lora("llama-tiny", targets);
    const ParameterLayout layout(c);
    const ParameterLayout base(resolve_model("llama-tiny"));
    ASSERT_EQ(layout.units().size(), base.units().size() + size_t(c.n_layer));
    int64_t adapter_elements = 0;
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const ParameterUnit& block = layout.unit(layout.block_unit(l));
      const ParameterUnit& adapters = layout.unit(layout.adapter_unit(l));
      EXPECT_EQ(block.name, cat("block.", l));
      EXPECT_EQ(adapters.name, cat("block.", l, ".lora"));
      EXPECT_FALSE(block.trainable);
      EXPECT_TRUE(adapters.trainable);
      EXPECT_EQ(layout.layer_of(layout.block_unit(l)), l);
      EXPECT_EQ(layout.layer_of(layout.adapter_unit(l)), l);
      EXPECT_TRUE(layout.is_adapter_unit(layout.adapter_unit(l)));
      EXPECT_FALSE(layout.is_adapter_unit(layout.block_unit(l)));
      // The base unit is the model's own, with the same random streams.
      EXPECT_EQ(block.init_id, base.unit(base.block_unit(l)).init_id);
      for (const ParameterTensor& t : adapters.tensors) adapter_elements += t.numel();
      for (AdaptedLinear linear : kAdaptedLinears) {
        const std::string name(adapted_linear_name(linear));
        EXPECT_EQ(adapters.has(name + ".lora_a"), has_adapter(c, linear)) << name;
        if (!has_adapter(c, linear)) continue;
        EXPECT_EQ(adapters.tensor(name + ".lora_a").shape, (Shape{c.lora.rank, adapted_linear_in(c, linear)}));
        EXPECT_EQ(adapters.tensor(name + ".lora_b").shape, (Shape{adapted_linear_out(c, linear), c.lora.rank}));
        EXPECT_EQ(adapters.tensor(name + ".lora_b").init, InitKind::zeros) << "B starts at zero";
      }
    }
    EXPECT_EQ(adapter_elements, lora_parameter_count(c));
    EXPECT_FALSE(layout.unit(layout.embedding_unit()).trainable);
    EXPECT_FALSE(layout.unit(layout.final_unit()).trainable);
    EXPECT_EQ(layout.final_unit(), layout.units().size() - 1);
  }
}

// Without LoRA every unit is trained and numbered as before.
TEST(LoraLayout, OffLeavesTheLayoutAsItWas) {
  const ParameterLayout layout(resolve_model("gpt2-tiny"));
  for (size_t u = 0; u < layout.units().size(); ++u) {
    EXPECT_TRUE(layout.unit(u).trainable);
    EXPECT_EQ(layout.unit(u).init_id, u);
  }
  EXPECT_EQ(layout.trainable_numel(), layout.total_numel());
  EXPECT_EQ(layout.block_unit(1), 2u);
}

using Fp64Model = test::HostModel<double>;

struct LoraGradientCase {
  const char* model;
  LoraTargets targets;
};

class LoraGradient : public ::testing::TestWithParam<LoraGradientCase> {
 protected:
  static constexpr int64_t kBatch = 2, kSeq = 8;
  // B drawn at random (it starts at zero, where A's gradient is zero too), and the tokens.
  void SetUp() override {
    SCOPED_TRACE(rnd_.trace());
    tokens_ = rnd_.ids(kBatch * kSeq, 200);
    targets_ = rnd_.ids(kBatch * kSeq, 200);
  }
  void randomize_b(Fp64Model& m) {
    const ParameterLayout& layout = m.layout();
    for (int64_t l = 0; l < layout.config().n_layer; ++l) {
      const size_t u = layout.adapter_unit(l);
      for (const ParameterTensor& t : layout.unit(u).tensors) {
        if (t.init != InitKind::zeros) continue;
        const std::vector<double> values = rnd_.normal(size_t(t.numel()), 0.05);
        std::copy(values.begin(), values.end(), m.params(u).begin() + t.offset);
      }
    }
  }
  test::RandomInputs rnd_;
  std::vector<int32_t> tokens_, targets_;
};

TEST_P(LoraGradient, AdaptersMatchFiniteDifferencesAndFrozenUnitsGetNone) {
  const auto [model, targets] = GetParam();
  SCOPED_TRACE(rnd_.trace());
  Fp64Model m(with_lora(model, targets), kBatch, kSeq);
  randomize_b(m);
  m.loss_and_gradients(tokens_, targets_);
  const ParameterLayout& layout = m.layout();
  for (int64_t l = 0; l < layout.config().n_layer; ++l) {
    const size_t u = layout.adapter_unit(l);
    for (const ParameterTensor& t : layout.unit(u).tensors) {
      // A view of the tensor's weights, perturbed in place, and its gradient.
      std::vector<double> x(m.params(u).begin() + t.offset, m.params(u).begin() + t.offset + t.numel());
      const std::vector<double> analytic(m.grads(u).begin() + t.offset, m.grads(u).begin() + t.offset + t.numel());
      EXPECT_GT(std::abs(test::dot(analytic, analytic)), 0.0) << t.name << ": no gradient reached it";
      std::vector<double>& stored = m.params(u);
      auto loss = [&] {
        std::copy(x.begin(), x.end(), stored.begin() + t.offset);
        return m.loss(tokens_, targets_);
      };
      test::expect_gradient_matches(x, analytic, loss, cat(layout.unit(u).name, ".", t.name), 1e-6);
      std::copy(x.begin(), x.end(), stored.begin() + t.offset);
    }
  }
  for (size_t u = 0; u < layout.units().size(); ++u) {
    if (!layout.unit(u).trainable) {
      EXPECT_TRUE(m.grads(u).empty()) << layout.unit(u).name;
    }
  }
}

// With dropout on the adapters' input, a pass's masks are fixed by its draw: the gradient is that of the loss
// with those masks (finite differences under the same draw), and another pass draws other masks.
TEST_P(LoraGradient, DropoutGradientIsThatOfItsMasks) {
  const auto [model, targets] = GetParam();
  SCOPED_TRACE(rnd_.trace());
  Fp64Model m(with_lora(model, targets, 3, 5.0, 0.3), kBatch, kSeq);
  randomize_b(m);
  m.transformer().set_dropout_draw(5, 17);
  m.loss_and_gradients(tokens_, targets_);
  const ParameterLayout& layout = m.layout();
  const size_t u = layout.adapter_unit(0);
  for (const ParameterTensor& t : layout.unit(u).tensors) {
    std::vector<double> x(m.params(u).begin() + t.offset, m.params(u).begin() + t.offset + t.numel());
    const std::vector<double> analytic(m.grads(u).begin() + t.offset, m.grads(u).begin() + t.offset + t.numel());
    std::vector<double>& stored = m.params(u);
    auto loss = [&] {
      std::copy(x.begin(), x.end(), stored.begin() + t.offset);
      return m.loss(tokens_, targets_);
    };
    test::expect_gradient_matches(x, analytic, loss, t.name, 1e-6);
    std::copy(x.begin(), x.end(), stored.begin() + t.offset);
  }
  // The embeddings' gradient is not computed (frozen), so the input's gradient is checked through the first
  // block's adapters above (their x is the dropped norm output) and by the loss: another draw, another loss.
  const double first = m.loss(tokens_, targets_);
  m.transformer().set_dropout_draw(5, 18);
  EXPECT_NE(m.loss(tokens_, targets_), first);
}

// The dropout mask keeps about 1 - p of the elements as they are, the same ones for the same draw.
TEST(LoraDropout, KeepsOneMinusPAndDrawsAlikeForTheSameArguments) {
  CpuBackend backend;
  const int64_t n = 200'000;
  std::vector<double> x(n, 2.0), a(n), b(n), c(n);
  Tensor ta = test::view(a, {n}), tb = test::view(b, {n}), tc = test::view(c, {n});
  backend.dropout_mask(test::view(x, {n}), 0.25, 9, 3, ta);
  backend.dropout_mask(test::view(x, {n}), 0.25, 9, 3, tb);
  backend.dropout_mask(test::view(x, {n}), 0.25, 9, 4, tc);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const int64_t kept = std::count(a.begin(), a.end(), 2.0);
  EXPECT_EQ(kept + std::count(a.begin(), a.end(), 0.0), n) << "every element kept as it is, or dropped";
  // Binomial(n, 0.75): standard deviation 194; five of them.
  EXPECT_NEAR(double(kept), 0.75 * double(n), 5 * 194.0);
}

// The model whose every adapted weight is W + s B A, trained without adapters, has the same loss; and its
// gradient dW' gives the adapters': dA = s B^T dW', dB = s dW' A^T. The base weights' gradients a LoRA run
// never computes are what the merged model computes for W'.
TEST_P(LoraGradient, AdaptersAreTheirMergedWeights) {
  const auto [model, targets] = GetParam();
  SCOPED_TRACE(rnd_.trace());
  const TransformerConfig config = with_lora(model, targets);
  Fp64Model lora(config, kBatch, kSeq);
  randomize_b(lora);
  TransformerConfig plain_config = config;
  plain_config.lora = {};
  Fp64Model merged(plain_config, kBatch, kSeq);
  const ParameterLayout& ll = lora.layout();
  const ParameterLayout& ml = merged.layout();
  const double s = config.lora.scale();
  const int64_t r = config.lora.rank;
  for (size_t u : {ll.embedding_unit(), ll.final_unit()}) {
    merged.params(u == ll.embedding_unit() ? ml.embedding_unit() : ml.final_unit()) = lora.params(u);
  }
  for (int64_t l = 0; l < config.n_layer; ++l) {
    std::vector<double>& w = merged.params(ml.block_unit(l));
    w = lora.params(ll.block_unit(l));
    const std::vector<double>& adapters = lora.params(ll.adapter_unit(l));
    for (AdaptedLinear linear : kAdaptedLinears) {
      if (!has_adapter(config, linear)) continue;
      const std::string name(adapted_linear_name(linear));
      const int64_t in = adapted_linear_in(config, linear), out = adapted_linear_out(config, linear);
      const int64_t a = ll.unit(ll.adapter_unit(l)).tensor(name + ".lora_a").offset;
      const int64_t b = ll.unit(ll.adapter_unit(l)).tensor(name + ".lora_b").offset;
      const int64_t weight = ml.unit(ml.block_unit(l)).tensor(name + ".weight").offset;
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) {
          double delta = 0;
          for (int64_t k = 0; k < r; ++k) delta += adapters[b + o * r + k] * adapters[a + k * in + i];
          w[weight + o * in + i] += s * delta;
        }
    }
  }
  const double lora_loss = lora.loss_and_gradients(tokens_, targets_);
  const double merged_loss = merged.loss_and_gradients(tokens_, targets_);
  EXPECT_NEAR(lora_loss, merged_loss, 1e-12 * merged_loss);
  for (int64_t l = 0; l < config.n_layer; ++l) {
    const std::vector<double>& adapters = lora.params(ll.adapter_unit(l));
    const std::vector<double>& adapter_grads = lora.grads(ll.adapter_unit(l));
    const std::vector<double>& dw = merged.grads(ml.block_unit(l));
    for (AdaptedLinear linear : kAdaptedLinears) {
      if (!has_adapter(config, linear)) continue;
      const std::string name(adapted_linear_name(linear));
      SCOPED_TRACE(cat("block ", l, " ", name));
      const int64_t in = adapted_linear_in(config, linear), out = adapted_linear_out(config, linear);
      const int64_t a = ll.unit(ll.adapter_unit(l)).tensor(name + ".lora_a").offset;
      const int64_t b = ll.unit(ll.adapter_unit(l)).tensor(name + ".lora_b").offset;
      const int64_t weight = ml.unit(ml.block_unit(l)).tensor(name + ".weight").offset;
      std::vector<double> da(size_t(r * in), 0.0), db(size_t(out * r), 0.0), got_a, got_b;
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i)
          for (int64_t k = 0; k < r; ++k) {
            da[k * in + i] += s * adapters[b + o * r + k] * dw[weight + o * in + i];
            db[o * r + k] += s * dw[weight + o * in + i] * adapters[a + k * in + i];
          }
      got_a.assign(adapter_grads.begin() + a, adapter_grads.begin() + a + r * in);
      got_b.assign(adapter_grads.begin() + b, adapter_grads.begin() + b + out * r);
      EXPECT_LE(test::relative_error(got_a, da), 1e-10);
      EXPECT_LE(test::relative_error(got_b, db), 1e-10);
    }
  }
}

// B starts at zero: the adapted model's loss is the base model's, to the bit, at the same seed.
TEST_P(LoraGradient, StartsAsTheBaseModel) {
  const auto [model, targets] = GetParam();
  const TransformerConfig config = with_lora(model, targets);
  TransformerConfig plain = config;
  plain.lora = {};
  Fp64Model lora(config, kBatch, kSeq), base(plain, kBatch, kSeq);
  EXPECT_EQ(lora.loss(tokens_, targets_), base.loss(tokens_, targets_));
}

INSTANTIATE_TEST_SUITE_P(Models, LoraGradient,
                         ::testing::Values(LoraGradientCase{"gpt2-tiny", LoraTargets::all},
                                           LoraGradientCase{"llama-tiny", LoraTargets::all},
                                           LoraGradientCase{"gpt2-tiny", LoraTargets::attention},
                                           LoraGradientCase{"llama-tiny", LoraTargets::mlp},
                                           LoraGradientCase{"gemma3-tiny", LoraTargets::all}),
                         [](const ::testing::TestParamInfo<LoraGradientCase>& param) {
                           std::string name = cat(param.param.model, "_", lora_targets_name(param.param.targets));
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace zb
