// The flat per-unit layout and its seeded, slice-independent initialisation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/errors.h"

#include "models/model_registry.h"
#include "models/parameter_layout.h"
#include "support/random_inputs.h"

namespace zb {
namespace {

TEST(ParameterLayout, TensorsAreAlignedDisjointAndCoverTheParameterCount) {
  for (const std::string name :
       {"gpt2", "facebook/opt-1.3b", "meta-llama/Llama-3.2-1B", "llama-tiny", "google/gemma-3-1b-pt", "gemma3-tiny"}) {
    const TransformerConfig config = resolve_model(name);
    const ParameterLayout layout(config);
    EXPECT_EQ(layout.units().size(), size_t(config.n_layer + 2)) << name;
    int64_t counted = 0;
    for (const ParameterUnit& unit : layout.units()) {
      int64_t end = 0;
      for (const ParameterTensor& t : unit.tensors) {
        EXPECT_EQ(t.offset % ParameterLayout::kTensorAlignment, 0) << name << " " << t.name;
        EXPECT_GE(t.offset, end) << name << " " << t.name << " overlaps its predecessor";
        end = t.offset + t.numel();
        counted += t.initialised_rows > 0 && t.init == InitKind::normal && t.shape.rank() == 2
                       ? t.initialised_rows * t.shape[1]
                       : t.numel();
      }
      EXPECT_EQ(unit.numel, end) << name << " " << unit.name;
    }
    EXPECT_EQ(counted, parameter_count(config)) << name;
  }
}

// The ranges no tensor covers are exactly the complement of the tensors in the buffer: gpt2-xl's 1600-wide
// vectors leave 64-element gaps before the next 128-aligned tensor, and a padded buffer adds its tail.
TEST(ParameterLayout, UncoveredRangesAreTheGapsAndTheTail) {
  for (const std::string name : {"gpt2", "gpt2-xl", "meta-llama/Llama-3.2-1B", "llama-tiny"}) {
    const ParameterLayout layout(resolve_model(name));
    for (const ParameterUnit& unit : layout.units()) {
      const int64_t length = unit.numel + 37;  // as a buffer padded to a multiple of the ranks would be
      std::vector<int> covered(size_t(length), 0);
      for (const ParameterTensor& t : unit.tensors)
        for (int64_t i = t.offset; i < t.offset + t.numel(); ++i) ++covered[size_t(i)];
      for (const auto& [begin, end] : unit.uncovered_ranges(length)) {
        ASSERT_LT(begin, end) << name << " " << unit.name;
        for (int64_t i = begin; i < end; ++i) ++covered[size_t(i)];
      }
      EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), length)
          << name << " " << unit.name << ": every element once, by a tensor or by an uncovered range";
    }
    const ParameterUnit& block = layout.unit(layout.block_unit(0));
    if (name != "llama-tiny") {
      EXPECT_EQ(block.uncovered_ranges(block.numel).empty(), name != "gpt2-xl") << name;
    }
  }
  EXPECT_THROW(ParameterLayout(resolve_model("gpt2")).unit(0).uncovered_ranges(10), Error);
}

// Gemma 3's block: its tensors in forward order, the q/k norms' gains [head_dim] beside the projection, the
// post-norms after the branches' outputs; every gain is 1 + w, so its weights start at zero (Llama's at one).
TEST(ParameterLayout, GemmaBlocksHoldFourNormsAndTheQkNormsStartingAtZero) {
  const TransformerConfig c = resolve_model("google/gemma-3-1b-pt");
  const ParameterLayout layout(c);
  const ParameterUnit& block = layout.unit(layout.block_unit(3));
  std::vector<std::string> names;
  for (const ParameterTensor& t : block.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ln1.weight", "attn.qkv.weight", "attn.q_norm.weight",
                                             "attn.k_norm.weight", "attn.proj.weight", "attn.post_norm.weight",
                                             "ln2.weight", "mlp.fc.weight", "mlp.proj.weight",
                                             "mlp.post_norm.weight"}));
  EXPECT_EQ(block.tensor("attn.q_norm.weight").shape, Shape{256});
  EXPECT_EQ(block.tensor("attn.qkv.weight").shape, (Shape{(4 + 2 * 1) * 256, 1152}));
  EXPECT_EQ(block.tensor("mlp.fc.weight").shape, (Shape{2 * 6912, 1152})) << "gate and up, fused";
  std::vector<float> values(size_t(block.numel));
  layout.initialize(layout.block_unit(3), 5, 0, block.numel, values.data());
  for (const char* gain : {"ln1.weight", "attn.q_norm.weight", "attn.k_norm.weight", "attn.post_norm.weight",
                           "ln2.weight", "mlp.post_norm.weight"}) {
    const ParameterTensor& t = block.tensor(gain);
    EXPECT_EQ(t.init, InitKind::zeros) << gain;
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(values[size_t(t.offset + i)], 0.0f) << gain;
  }
  EXPECT_FALSE(layout.unit(layout.final_unit()).has("lm_head")) << "the head is the embedding table";
  EXPECT_EQ(layout.unit(layout.final_unit()).tensor("ln_f.weight").init, InitKind::zeros);
  EXPECT_EQ(ParameterLayout(resolve_model("llama-tiny")).unit(1).tensor("ln1.weight").init, InitKind::ones);
}

TEST(ParameterLayout, AnySliceInitialisesAsTheWholeBufferWould) {
  TransformerConfig config = resolve_model("gpt2-tiny");
  config.vocab_size = 300;  // padded to 384 rows
  const ParameterLayout layout(config);
  test::RandomInputs rnd;
  SCOPED_TRACE(rnd.trace());
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const int64_t n = layout.unit(u).numel;
    std::vector<float> whole(n);
    layout.initialize(u, 99, 0, n, whole.data());
    const auto cut = rnd.ids(2, int32_t(n));
    const int64_t begin = std::min(cut[0], cut[1]), end = std::max(cut[0], cut[1]);
    std::vector<float> part(end - begin);
    layout.initialize(u, 99, begin, end, part.data());
    for (int64_t i = begin; i < end; ++i) ASSERT_EQ(part[i - begin], whole[i]) << layout.unit(u).name << " element " << i;
  }
}

TEST(ParameterLayout, InitialValuesFollowTheScheme) {
  TransformerConfig config = resolve_model("gpt2-tiny");
  config.vocab_size = 300;
  const ParameterLayout layout(config);
  std::vector<float> emb(layout.unit(0).numel);
  layout.initialize(0, 5, 0, emb.size(), emb.data());
  const ParameterTensor& wte = layout.unit(0).tensor("wte");
  double sum_sq = 0;
  for (int64_t i = 0; i < 300 * config.d_model; ++i) sum_sq += double(emb[i]) * emb[i];
  EXPECT_NEAR(std::sqrt(sum_sq / (300 * config.d_model)), 0.02, 0.001);
  for (int64_t i = 300 * config.d_model; i < wte.numel(); ++i) ASSERT_EQ(emb[i], 0.0f) << "vocabulary padding stays zero";

  const ParameterUnit& block = layout.unit(1);
  std::vector<float> b(block.numel);
  layout.initialize(1, 5, 0, b.size(), b.data());
  for (int64_t i = 0; i < config.d_model; ++i) {
    EXPECT_EQ(b[block.tensor("ln1.weight").offset + i], 1.0f);
    EXPECT_EQ(b[block.tensor("ln1.bias").offset + i], 0.0f);
  }
  // A different seed gives different weights.
  std::vector<float> other(layout.unit(0).numel);
  layout.initialize(0, 6, 0, other.size(), other.data());
  EXPECT_NE(other[0], emb[0]);
}

}  // namespace
}  // namespace zb
