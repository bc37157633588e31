// ParameterLayout: where every weight lives. Parameters are grouped into units that are gathered and
// released together (the embeddings, each transformer block, the final norm and head); each unit is one
// flat buffer and its tensors are views at fixed offsets. Gradients and optimizer state use the same layout,
// so that one flat range of a unit means the same weights in all of them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/transformer_config.h"

namespace zb {

enum class InitKind { normal, zeros, ones };

struct ParameterTensor {
  std::string name;       // e.g. "attn.qkv.weight"
  Shape shape;
  int64_t offset = 0;     // in elements, from the start of the unit's flat buffer
  InitKind init = InitKind::zeros;
  double init_std = 0.0;  // for InitKind::normal
  int64_t initialised_rows = 0;  // rows drawn at random; the rest (vocabulary padding) stay zero
  int64_t numel() const { return shape.numel(); }
};

// A stretch of a unit's initial values that one rule fills: elements [first, first + count) of the unit's flat
// buffer hold `value` (InitKind::ones), or std * random_normal(seed, stream, element + i) for the i-th of them
// (InitKind::normal; core/random.h), so that any slice of a tensor is drawn on its own.
struct InitialFill {
  int64_t first = 0;
  int64_t count = 0;
  InitKind init = InitKind::zeros;
  double std = 0.0;
  uint64_t stream = 0;
  int64_t element = 0;  // the first value's index within its tensor
};

struct ParameterUnit {
  std::string name;  // "embeddings", "block.3", "block.3.lora", "final"
  std::vector<ParameterTensor> tensors;
  int64_t numel = 0;  // the flat buffer's length, alignment gaps included
  // Whether the unit is trained. A frozen unit (the base model's, under LoRA) has no gradient and no optimizer
  // state; its weights are only read.
  bool trainable = true;
  // Numbers the unit's random streams (InitialFill::stream): its index in the model without adapters, so that
  // LoRA's base model is, at the same seed, the model trained without LoRA; adapter units follow all of those.
  uint64_t init_id = 0;

  const ParameterTensor& tensor(const std::string& tensor_name) const;
  bool has(const std::string& tensor_name) const;
  // The [begin, end) ranges of a buffer of `length` elements (at least numel) that no tensor covers: the
  // alignment gaps and the tail. Nothing computes values there; they must hold zeros, which a gradient
  // buffer keeps only if whoever reuses it zeroes them.
  std::vector<std::pair<int64_t, int64_t>> uncovered_ranges(int64_t length) const;
};

class ParameterLayout {
 public:
  // Tensor offsets are multiples of this many elements (256 bytes of bf16), so that every tensor starts
  // aligned for vector loads and GEMMs whatever its predecessor's size.
  static constexpr int64_t kTensorAlignment = 128;

  explicit ParameterLayout(const TransformerConfig& config);

  const TransformerConfig& config() const { return config_; }
  const std::vector<ParameterUnit>& units() const { return units_; }
  const ParameterUnit& unit(size_t index) const { return units_.at(index); }
  // The units in forward order: the embeddings, each block (followed by its adapters' unit under LoRA), the
  // final norm and head.
  size_t embedding_unit() const { return 0; }
  size_t block_unit(int64_t layer) const { return 1 + static_cast<size_t>(layer) * (has_adapters() ? 2 : 1); }
  // Under LoRA: the unit of block `layer`'s adapters, right after the block's own.
  size_t adapter_unit(int64_t layer) const { return block_unit(layer) + 1; }
  size_t final_unit() const { return units_.size() - 1; }
  bool has_adapters() const { return config_.lora.enabled(); }
  // The block a block or adapter unit belongs to.
  int64_t layer_of(size_t unit) const { return int64_t(unit - 1) / (has_adapters() ? 2 : 1); }
  bool is_adapter_unit(size_t unit) const {
    return has_adapters() && unit != embedding_unit() && unit != final_unit() && (unit - 1) % 2 == 1;
  }
  int64_t total_numel() const;
  // The elements of the trainable units (all of them without LoRA).
  int64_t trainable_numel() const;

  // Writes elements [begin, end) of unit `unit_index`'s flat buffer as initialised under `seed` into out
  // (fp32, end - begin elements). Any range gives the values the whole buffer would hold there.
  void initialize(size_t unit_index, uint64_t seed, int64_t begin, int64_t end, float* out) const;
  // The same values as a list of fills, for a device to compute where they are needed: elements
  // [begin, end) of the unit are zero except for these stretches.
  std::vector<InitialFill> initial_fills(size_t unit_index, int64_t begin, int64_t end) const;

 private:
  TransformerConfig config_;
  std::vector<ParameterUnit> units_;
};

}  // namespace zb
