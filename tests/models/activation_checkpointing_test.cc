// What each activation checkpointing mode keeps: the activation buffers it plans, against the tensors
// models/activation_checkpointing.h says it keeps, and the share of activation memory selective saves.
#include <gtest/gtest.h>

#include "core/errors.h"
#include "kernels/backend.h"
#include "models/activations.h"
#include "models/model_registry.h"

namespace zb {
namespace {

using Mode = ActivationCheckpointing;

TEST(ActivationCheckpointing, NamesRoundTripAndOthersAreRefused) {
  for (Mode mode : {Mode::none, Mode::full, Mode::selective})
    EXPECT_EQ(parse_activation_checkpointing(activation_checkpointing_name(mode)), mode);
  try {
    parse_activation_checkpointing("partial");
    FAIL() << "accepted 'partial'";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "unknown activation checkpointing 'partial' (accepted: none, full, selective)");
  }
}

// Bytes of one layer's tensors, by name, for n tokens.
struct LayerBytes {
  size_t norm, qkv, attention, mid, fc, activated;  // norm: the output and its statistics
};

LayerBytes layer_bytes(const TransformerConfig& c, DType dtype, int64_t batch, int64_t seq) {
  const size_t n = size_t(batch * seq), e = dtype_size(dtype), s = dtype_size(stats_dtype(dtype));
  const size_t d = size_t(c.d_model);
  return {n * d * e + 2 * n * s,
          n * size_t(c.qkv_width()) * e,
          n * size_t(c.attention_width()) * e + size_t(batch * c.n_head * seq) * s,  // with the softmax statistics
          n * d * e,
          n * size_t(c.mlp_in_width()) * e,
          n * size_t(c.d_ff) * e};
}

// Every layer but one gives up the tensors the mode recomputes (one shared set holds them for the layer
// whose backward runs); the residual stream, the final norm, the logits and the backward's scratch stay.
TEST(ActivationCheckpointing, ModesKeepWhatTheyDocument) {
  for (const char* name : {"gpt2-tiny", "llama-tiny", "gpt2-xl", "meta-llama/Llama-2-7b-hf"}) {
    SCOPED_TRACE(name);
    const TransformerConfig c = resolve_model(name);
    const int64_t batch = 2, seq = 64;
    const LayerBytes b = layer_bytes(c, DType::bf16, batch, seq);
    const size_t none = Activations::planned_bytes(c, DType::bf16, batch, seq, Mode::none);
    const size_t full = Activations::planned_bytes(c, DType::bf16, batch, seq, Mode::full);
    const size_t selective = Activations::planned_bytes(c, DType::bf16, batch, seq, Mode::selective);
    const size_t others = size_t(c.n_layer - 1);
    EXPECT_EQ(none - full, others * (2 * b.norm + b.qkv + b.attention + b.mid + b.fc + b.activated))
        << "full keeps only each block's input";
    EXPECT_EQ(none - selective, others * (2 * b.norm + b.attention + b.mid + b.activated))
        << "selective keeps q/k/v and the MLP's input projection";
  }
}

// Gemma 3's block keeps more: q/k/v as projected (qkv_raw) beside their normed and rotated copy with the norms'
// statistics, and the branches' outputs before their post-norms with theirs. Selective keeps the projections
// (q/k/v, the MLP's input and output) and recomputes the rest; full keeps only each block's input.
TEST(ActivationCheckpointing, GemmaModesKeepWhatTheyDocument) {
  for (const char* name : {"gemma3-tiny", "google/gemma-3-1b-pt"}) {
    SCOPED_TRACE(name);
    const TransformerConfig c = resolve_model(name);
    const int64_t batch = 2, seq = 64;
    const LayerBytes b = layer_bytes(c, DType::bf16, batch, seq);
    const size_t n = size_t(batch * seq), s = dtype_size(DType::f32);
    const size_t qk_rstd = n * size_t(c.n_head + c.n_kv_head) * s, branch = b.mid + n * s;  // output + rstd
    const size_t none = Activations::planned_bytes(c, DType::bf16, batch, seq, Mode::none);
    const size_t full = Activations::planned_bytes(c, DType::bf16, batch, seq, Mode::full);
    const size_t selective = Activations::planned_bytes(c, DType::bf16, batch, seq, Mode::selective);
    const size_t others = size_t(c.n_layer - 1);
    EXPECT_EQ(none - full,
              others * (2 * b.norm + 2 * b.qkv + qk_rstd + b.attention + 2 * branch + b.mid + b.fc + b.activated))
        << "full keeps only each block's input";
    EXPECT_EQ(none - selective, others * (2 * b.norm + b.qkv + qk_rstd + b.attention + branch + b.mid + b.activated))
        << "selective keeps q/k/v as projected and the MLP's two projections";
  }
}

// Selective checkpointing gives up at least 35% of the activation memory at the sizes the users train
// (sequence 1024 and 2048), full far more.
TEST(ActivationCheckpointing, SelectiveSavesAThirdOfTheActivationsOfLargeModels) {
  for (const auto& [name, seq] : {std::pair{"gpt2-xl", 1024}, std::pair{"meta-llama/Llama-2-7b-hf", 2048}}) {
    SCOPED_TRACE(name);
    const TransformerConfig c = resolve_model(name);
    const double none = double(Activations::planned_bytes(c, DType::bf16, 8, seq, Mode::none));
    const double selective = double(Activations::planned_bytes(c, DType::bf16, 8, seq, Mode::selective));
    const double full = double(Activations::planned_bytes(c, DType::bf16, 8, seq, Mode::full));
    EXPECT_GE(1 - selective / none, 0.35);
    EXPECT_LE(full / none, 0.2);
  }
}

}  // namespace
}  // namespace zb
