// Synthetic token batches: seeded uniform ids, a pure function of (seed, sample, position). Samples are
// numbered over the whole run (call k of rank r takes samples k * world * batch + r * batch + [0, batch)),
// so that any split into ranks and micro-batches deals out the same samples in the same order.
#include "core/random.h"
#include "core/strings.h"
#include "engine/token_source.h"

namespace zb {

namespace {

constexpr uint64_t kTokenStream = 0x70b3;  // keeps token draws apart from the weight initialisation's streams

class SyntheticTokens final : public TokenSource {
 public:
  SyntheticTokens(BatchGeometry g, int64_t vocab, uint64_t seed) : g_(g), vocab_(vocab), seed_(seed) {}

  TokenBatch next_batch() override {
    TokenBatch batch;
    batch.inputs.resize(g_.batch * g_.seq);
    batch.targets.resize(g_.batch * g_.seq);
    const int64_t first = int64_t(batch_index_++) * g_.world * g_.batch + int64_t(g_.rank) * g_.batch;
    for (int64_t s = 0; s < g_.batch; ++s) {
      const int64_t sample = first + s;
      auto token = [&](int64_t t) {
        return int32_t(random_below(seed_, kTokenStream, uint64_t(sample * (g_.seq + 1) + t), uint32_t(vocab_)));
      };
      for (int64_t t = 0; t < g_.seq; ++t) {
        batch.inputs[s * g_.seq + t] = token(t);
        batch.targets[s * g_.seq + t] = token(t + 1);
      }
    }
    return batch;
  }

  std::string describe() const override { return cat("synthetic uniform tokens (seed ", seed_, ")"); }

 private:
  BatchGeometry g_;
  int64_t vocab_;
  uint64_t seed_;
  uint64_t batch_index_ = 0;
};

}  // namespace

std::unique_ptr<TokenSource> make_synthetic_tokens(BatchGeometry geometry, int64_t vocab, uint64_t seed) {
  return std::make_unique<SyntheticTokens>(geometry, vocab, seed);
}

}  // namespace zb
