// The golden files tests/reference/make_golden.py writes from Hugging Face's own model classes (float64): where
// they are, the model each describes, its weights under the engine's unit layout, and its token batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/token_source.h"
#include "models/parameter_layout.h"
#include "models/transformer_config.h"
#include "support/safetensors.h"

namespace zb::test {

// tests/reference/golden_<model with '_' for '-'>.safetensors in the source tree.
std::string golden_path(const std::string& model);

// The model of the file's "hf_config" metadata, read as a config.json is.
TransformerConfig golden_config(const SafetensorsFile& file);

// Unit u's flat values with every tensor of the unit replaced by the file's "<prefix><unit>/<tensor>" (the padding
// left as `flat` has it). Throws std::runtime_error naming a tensor the file lacks or holds at another size.
std::vector<float> golden_unit_values(const SafetensorsFile& file, const std::string& prefix,
                                      const ParameterLayout& layout, size_t u, std::vector<float> flat);

// The file's tensors under `prefix` that have no place in the layout (none, for a file of this model).
std::vector<std::string> golden_tensors_outside(const SafetensorsFile& file, const std::string& prefix,
                                                const ParameterLayout& layout);

// The logits of a forward pass as the engine keeps them ([rows, padded vocabulary], row after row) cut to the first
// `vocab` columns of each row: the layout of the file's "logits" ([batch x seq, vocab]).
std::vector<float> vocabulary_columns(const std::vector<float>& logits, int64_t rows, int64_t vocab);

// The file's "tokens": batch rows of seq + 1 tokens a step, inputs and the targets one position on.
class GoldenTokens final : public TokenSource {
 public:
  GoldenTokens(std::vector<int32_t> tokens, int64_t batch, int64_t seq)
      : tokens_(std::move(tokens)), batch_(batch), seq_(seq) {}
  TokenBatch next_batch() override;
  std::string describe() const override { return "golden tokens"; }

 private:
  std::vector<int32_t> tokens_;
  int64_t batch_, seq_, step_ = 0;
};

}  // namespace zb::test
