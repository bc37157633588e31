// A tiny Gemma 3 on the CPU backend in fp64, against Gemma 3's text model written out here from its definition
// (Hugging Face's Gemma3ForCausalLM: the embeddings times sqrt(width); in each layer RMSNorm (1 + w) before and
// after the attention and the MLP, q/k norms per head before the rotary embedding, the sliding-window layers'
// own rotary base and window, the full layers' linearly scaled rotary, scores scaled by query_pre_attn_scalar^-0.5,
// GeGLU; the final norm; the tied head). Every weight is random, the norms' away from their neutral zero, and the
// sequence is twice the window, so that each part shows in the loss. Then the gradients against finite
// differences, and the checkpointing modes against none, to the bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/strings.h"
#include "models/model_registry.h"
#include "support/gradient_check.h"
#include "support/host_model.h"
#include "support/random_inputs.h"

namespace zb {
namespace {

// gemma3-tiny with three layers (sliding, full, sliding), a window of 4 over 8 tokens, an attention scale other than
// head_dim's and the full layers' rotary scaled linearly.
TransformerConfig gemma_case() {
  TransformerConfig c = resolve_model("gemma3-tiny");
  c.n_layer = 3;
  c.layer_attention = {LayerAttention::sliding, LayerAttention::full, LayerAttention::sliding};
  c.sliding_window = 4;
  c.query_pre_attn_scalar = 24;
  c.rope_linear_factor = 2;
  c.validate();
  return c;
}

constexpr int64_t kBatch = 2, kSeq = 8;

// The model's weights by name, read from a host model's unit vectors.
class Weights {
 public:
  explicit Weights(test::HostModel<double>& m) : m_(m) {}
  const double* operator()(size_t unit, const std::string& name) {
    return m_.params(unit).data() + m_.layout().unit(unit).tensor(name).offset;
  }

 private:
  test::HostModel<double>& m_;
};

using Rows = std::vector<std::vector<double>>;

// x / sqrt(mean(x^2) + eps) * (1 + w) over one row.
std::vector<double> rmsnorm(const std::vector<double>& x, const double* w, double eps) {
  double sum_sq = 0;
  for (double v : x) sum_sq += v * v;
  const double rs = 1 / std::sqrt(sum_sq / double(x.size()) + eps);
  std::vector<double> out(x.size());
  for (size_t j = 0; j < x.size(); ++j) out[j] = x[j] * rs * (1 + w[j]);
  return out;
}

// y = x W^T for W [out, in].
std::vector<double> linear(const std::vector<double>& x, const double* w, int64_t out) {
  std::vector<double> y(size_t(out), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (size_t i = 0; i < x.size(); ++i) y[size_t(o)] += x[i] * w[o * int64_t(x.size()) + int64_t(i)];
  return y;
}

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

// Rotate-half rotary embedding of one head at position t.
void rotate(double* x, int64_t d, int64_t t, double theta, double linear_factor) {
  for (int64_t i = 0; i < d / 2; ++i) {
    const double angle = double(t) / std::pow(theta, double(2 * i) / double(d)) / linear_factor;
    const double a = x[i], b = x[i + d / 2];
    x[i] = a * std::cos(angle) - b * std::sin(angle);
    x[i + d / 2] = b * std::cos(angle) + a * std::sin(angle);
  }
}

// The mean cross-entropy of Gemma 3's text model on one batch, from the definition.
double reference_loss(const TransformerConfig& c, test::HostModel<double>& m, const std::vector<int32_t>& tokens,
                      const std::vector<int32_t>& targets) {
  Weights w(m);
  const ParameterLayout& layout = m.layout();
  const int64_t d = c.d_model, hd = c.head_dim, heads = c.n_head, kv = c.n_kv_head, f = c.d_ff;
  const double eps = c.norm_eps;
  const double* wte = w(layout.embedding_unit(), "wte");
  double loss = 0;
  for (int64_t b = 0; b < kBatch; ++b) {
    Rows h(kSeq);
    for (int64_t t = 0; t < kSeq; ++t) {
      const int32_t token = tokens[b * kSeq + t];
      for (int64_t j = 0; j < d; ++j) h[t].push_back(wte[token * d + j] * double(float(std::sqrt(double(d)))));
    }
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const size_t u = layout.block_unit(l);
      const bool sliding = c.sliding_layer(l);
      Rows q(kSeq), k(kSeq), v(kSeq);
      for (int64_t t = 0; t < kSeq; ++t) {
        const std::vector<double> qkv =
            linear(rmsnorm(h[t], w(u, "ln1.weight"), eps), w(u, "attn.qkv.weight"), (heads + 2 * kv) * hd);
        for (int64_t head = 0; head < heads + kv; ++head) {
          std::vector<double> x(qkv.begin() + head * hd, qkv.begin() + (head + 1) * hd);
          x = rmsnorm(x, w(u, head < heads ? "attn.q_norm.weight" : "attn.k_norm.weight"), eps);
          rotate(x.data(), hd, t, sliding ? *c.local_rope_theta : c.rope_theta, sliding ? 1.0 : c.rope_linear_factor);
          (head < heads ? q[t] : k[t]).insert((head < heads ? q[t] : k[t]).end(), x.begin(), x.end());
        }
        v[t].assign(qkv.begin() + (heads + kv) * hd, qkv.end());
      }
      for (int64_t t = 0; t < kSeq; ++t) {
        std::vector<double> attention(size_t(heads * hd), 0.0);
        for (int64_t head = 0; head < heads; ++head) {
          const int64_t g = head / (heads / kv);
          const int64_t first = sliding ? std::max<int64_t>(0, t - *c.sliding_window + 1) : 0;
          std::vector<double> p;
          double most = -1e300, sum = 0;
          for (int64_t s = first; s <= t; ++s) {
            double score = 0;
            for (int64_t i = 0; i < hd; ++i) score += q[t][head * hd + i] * k[s][g * hd + i];
            p.push_back(score / std::sqrt(*c.query_pre_attn_scalar));
            most = std::max(most, p.back());
          }
          for (double& x : p) sum += (x = std::exp(x - most));
          for (size_t j = 0; j < p.size(); ++j)
            for (int64_t i = 0; i < hd; ++i) attention[head * hd + i] += p[j] / sum * v[first + int64_t(j)][g * hd + i];
        }
        const std::vector<double> out =
            rmsnorm(linear(attention, w(u, "attn.proj.weight"), d), w(u, "attn.post_norm.weight"), eps);
        for (int64_t j = 0; j < d; ++j) h[t][j] += out[j];
      }
      for (int64_t t = 0; t < kSeq; ++t) {
        const std::vector<double> fc = linear(rmsnorm(h[t], w(u, "ln2.weight"), eps), w(u, "mlp.fc.weight"), 2 * f);
        std::vector<double> activated(static_cast<size_t>(f));
        for (int64_t j = 0; j < f; ++j) activated[j] = gelu_tanh(fc[j]) * fc[f + j];
        const std::vector<double> out =
            rmsnorm(linear(activated, w(u, "mlp.proj.weight"), d), w(u, "mlp.post_norm.weight"), eps);
        for (int64_t j = 0; j < d; ++j) h[t][j] += out[j];
      }
    }
    for (int64_t t = 0; t < kSeq; ++t) {
      const std::vector<double> logits =
          linear(rmsnorm(h[t], w(layout.final_unit(), "ln_f.weight"), eps), wte, c.vocab_size);
      double most = -1e300, sum = 0;
      for (double x : logits) most = std::max(most, x);
      for (double x : logits) sum += std::exp(x - most);
      loss += most + std::log(sum) - logits[size_t(targets[b * kSeq + t])];
    }
  }
  return loss / double(kBatch * kSeq);
}

class Gemma3Model : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens_ = rnd_.ids(kBatch * kSeq, int32_t(config_.vocab_size));
    targets_ = rnd_.ids(kBatch * kSeq, int32_t(config_.vocab_size));
  }
  // Every weight away from its initial value: the norms' gains 1 + w with w ~ 0.3, the others wider than 0.02.
  template <typename T>
  void randomize(test::HostModel<T>& m) {
    for (size_t u = 0; u < m.layout().units().size(); ++u) {
      for (const ParameterTensor& t : m.layout().unit(u).tensors) {
        const int64_t rows = t.name == "wte" ? config_.vocab_size : t.shape[0];
        const std::vector<double> values = rnd_.normal(size_t(rows * (t.numel() / t.shape[0])), 0.3);
        std::copy(values.begin(), values.end(), m.params(u).begin() + t.offset);
      }
    }
  }

  // What a checkpointing mode recomputes it computes again as the forward did: the same loss and gradients, bit
  // for bit.
  template <typename T>
  void expect_modes_agree() {
    test::HostModel<T> none(config_, kBatch, kSeq);
    randomize(none);
    const double loss = none.loss_and_gradients(tokens_, targets_);
    for (ActivationCheckpointing mode : {ActivationCheckpointing::full, ActivationCheckpointing::selective}) {
      SCOPED_TRACE(activation_checkpointing_name(mode));
      test::HostModel<T> other(config_, kBatch, kSeq, mode);
      for (size_t u = 0; u < none.layout().units().size(); ++u) other.params(u) = none.params(u);
      EXPECT_EQ(other.loss_and_gradients(tokens_, targets_), loss);
      for (size_t u = 0; u < none.layout().units().size(); ++u) {
        EXPECT_EQ(other.grads(u), none.grads(u)) << none.layout().unit(u).name;
      }
    }
  }

  const TransformerConfig config_ = gemma_case();
  test::RandomInputs rnd_;
  ::testing::ScopedTrace trace_{__FILE__, __LINE__, rnd_.trace()};
  std::vector<int32_t> tokens_, targets_;
};

TEST_F(Gemma3Model, LossIsTheDefinitions) {
  test::HostModel<double> m(config_, kBatch, kSeq);
  randomize(m);
  const double expected = reference_loss(config_, m, tokens_, targets_);
  EXPECT_NEAR(m.loss(tokens_, targets_), expected, 1e-12 * expected);
  EXPECT_NEAR(m.loss_and_gradients(tokens_, targets_), expected, 1e-12 * expected);
}

// A sample of every tensor's elements (the embedding table's rows of the batch's tokens among them).
TEST_F(Gemma3Model, GradientsMatchFiniteDifferences) {
  test::HostModel<double> m(config_, kBatch, kSeq);
  randomize(m);
  m.loss_and_gradients(tokens_, targets_);
  const ParameterLayout& layout = m.layout();
  for (size_t u = 0; u < layout.units().size(); ++u) {
    for (const ParameterTensor& t : layout.unit(u).tensors) {
      std::vector<int64_t> picks;
      for (int32_t i : rnd_.ids(6, int32_t(t.name == "wte" ? config_.d_model : t.numel()))) picks.push_back(i);
      if (t.name == "wte") {  // rows the batch looks up (the others get the head's gradient alone)
        for (int64_t& i : picks) i += int64_t(tokens_[size_t(i) % tokens_.size()]) * config_.d_model;
      }
      std::sort(picks.begin(), picks.end());
      picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
      std::vector<double> x, analytic;
      for (int64_t i : picks) {
        x.push_back(m.params(u)[size_t(t.offset + i)]);
        analytic.push_back(m.grads(u)[size_t(t.offset + i)]);
      }
      auto loss = [&] {
        for (size_t p = 0; p < picks.size(); ++p) m.params(u)[size_t(t.offset + picks[p])] = x[p];
        return m.loss(tokens_, targets_);
      };
      test::expect_gradient_matches(x, analytic, loss, cat(layout.unit(u).name, ".", t.name), 1e-6);
      loss();
    }
  }
}

TEST_F(Gemma3Model, CheckpointingRecomputesTheSameBitsInFp64AndFp32) {
  expect_modes_agree<double>();
  expect_modes_agree<float>();
}

}  // namespace
}  // namespace zb
