#include "models/parameter_layout.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/random.h"

namespace zb {

namespace {

constexpr double kInitStd = 0.02;  // GPT-2's and Llama's initializer_range

class UnitBuilder {
 public:
  explicit UnitBuilder(std::string name) { unit_.name = std::move(name); }

  UnitBuilder& normal(const std::string& name, Shape shape, double std, int64_t initialised_rows = -1) {
    return add(name, shape, InitKind::normal, std, initialised_rows < 0 ? shape[0] : initialised_rows);
  }
  UnitBuilder& zeros(const std::string& name, Shape shape) { return add(name, shape, InitKind::zeros, 0, 0); }
  UnitBuilder& ones(const std::string& name, Shape shape) { return add(name, shape, InitKind::ones, 0, shape[0]); }
  ParameterUnit build() { return std::move(unit_); }

 private:
  UnitBuilder& add(const std::string& name, Shape shape, InitKind init, double std, int64_t rows) {
    const int64_t offset = (unit_.numel + ParameterLayout::kTensorAlignment - 1) / ParameterLayout::kTensorAlignment *
                           ParameterLayout::kTensorAlignment;
    unit_.tensors.push_back({name, shape, offset, init, std, rows});
    unit_.numel = offset + shape.numel();
    return *this;
  }
  ParameterUnit unit_;
};

// A norm's gain over `width` columns starts at 1: the weight itself, or 0 where the gain is 1 + weight (Gemma).
void add_gain(UnitBuilder& unit, const TransformerConfig& c, const std::string& name, int64_t width) {
  if (c.norm_gain_offset == 0) {
    unit.ones(name, Shape{width});
  } else {
    unit.zeros(name, Shape{width});
  }
}

void add_norm(UnitBuilder& unit, const TransformerConfig& c, const std::string& prefix) {
  add_gain(unit, c, prefix + ".weight", c.d_model);
  if (c.norm == NormKind::layernorm) unit.zeros(prefix + ".bias", Shape{c.d_model});
}

void add_linear(UnitBuilder& unit, const TransformerConfig& c, const std::string& prefix, int64_t out, int64_t in,
                double std) {
  unit.normal(prefix + ".weight", Shape{out, in}, std);
  if (c.bias) unit.zeros(prefix + ".bias", Shape{out});
}

// Block `layer`'s adapters: for each adapted linear layer "<name>.lora_a" [rank, in], drawn as PEFT's default
// (Kaiming-uniform with a = sqrt(5), whose variance 1 / (3 in) a normal of that variance matches), and
// "<name>.lora_b" [out, rank], zero.
ParameterUnit lora_unit(const TransformerConfig& c, int64_t layer) {
  UnitBuilder unit("block." + std::to_string(layer) + ".lora");
  for (AdaptedLinear linear : kAdaptedLinears) {
    if (!has_adapter(c, linear)) continue;
    const std::string name(adapted_linear_name(linear));
    const int64_t in = adapted_linear_in(c, linear), out = adapted_linear_out(c, linear);
    unit.normal(name + ".lora_a", Shape{c.lora.rank, in}, 1.0 / std::sqrt(3.0 * double(in)));
    unit.zeros(name + ".lora_b", Shape{out, c.lora.rank});
  }
  return unit.build();
}

}  // namespace

const ParameterTensor& ParameterUnit::tensor(const std::string& tensor_name) const {
  for (const auto& t : tensors)
    if (t.name == tensor_name) return t;
  throw Error(cat("unit '", name, "' has no tensor '", tensor_name, "'"));
}

bool ParameterUnit::has(const std::string& tensor_name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& t) { return t.name == tensor_name; });
}

std::vector<std::pair<int64_t, int64_t>> ParameterUnit::uncovered_ranges(int64_t length) const {
  ZB_CHECK(length >= numel, "unit '", name, "' is ", numel, " elements, longer than its buffer of ", length);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t covered_to = 0;  // the tensors are in offset order
  for (const ParameterTensor& t : tensors) {
    if (t.offset > covered_to) ranges.emplace_back(covered_to, t.offset);
    covered_to = t.offset + t.numel();
  }
  if (length > covered_to) ranges.emplace_back(covered_to, length);
  return ranges;
}

ParameterLayout::ParameterLayout(const TransformerConfig& config) : config_(config) {
  const auto& c = config_;
  if (c.lora.enabled()) c.validate();  // (a configuration built in code, not read: its adapters' rank, alpha, dropout)
  const int64_t vp = c.padded_vocab();

  UnitBuilder embeddings("embeddings");
  embeddings.normal("wte", Shape{vp, c.d_model}, kInitStd, c.vocab_size);
  if (c.has_learned_positions())
    embeddings.normal("wpe", Shape{c.max_seq_len + c.position_offset, c.d_model}, kInitStd);
  units_.push_back(embeddings.build());

  // Residual-branch output projections start smaller (GPT-2: std / sqrt(2 * layers)), so that the residual
  // stream's variance does not grow with depth.
  const double residual_std = kInitStd / std::sqrt(2.0 * double(c.n_layer));
  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    // In forward order; Gemma's q/k norms follow the projection they normalise, its post-norms the branch's output.
    UnitBuilder block("block." + std::to_string(layer));
    add_norm(block, c, "ln1");
    add_linear(block, c, "attn.qkv", c.qkv_width(), c.d_model, kInitStd);
    if (c.qk_norm) {
      add_gain(block, c, "attn.q_norm.weight", c.head_dim);
      add_gain(block, c, "attn.k_norm.weight", c.head_dim);
    }
    add_linear(block, c, "attn.proj", c.d_model, c.attention_width(), residual_std);
    if (c.post_norms) add_norm(block, c, "attn.post_norm");
    add_norm(block, c, "ln2");
    add_linear(block, c, "mlp.fc", c.mlp_in_width(), c.d_model, kInitStd);
    add_linear(block, c, "mlp.proj", c.d_model, c.d_ff, residual_std);
    if (c.post_norms) add_norm(block, c, "mlp.post_norm");
    units_.push_back(block.build());
    if (c.lora.enabled()) units_.push_back(lora_unit(c, layer));
  }

  UnitBuilder final_unit("final");
  add_norm(final_unit, c, "ln_f");
  if (!c.tied_embeddings) final_unit.normal("lm_head", Shape{vp, c.d_model}, kInitStd, c.vocab_size);
  units_.push_back(final_unit.build());
  uint64_t base_units = 0;
  for (const ParameterUnit& unit : units_) base_units += !unit.name.ends_with(".lora");
  uint64_t next_base = 0, next_adapter = base_units;
  for (ParameterUnit& unit : units_) {
    const bool adapter = unit.name.ends_with(".lora");
    unit.init_id = adapter ? next_adapter++ : next_base++;
    if (c.lora.enabled()) unit.trainable = adapter;  // only the adapters are trained
  }
}

int64_t ParameterLayout::trainable_numel() const {
  int64_t total = 0;
  for (const auto& u : units_)
    if (u.trainable) total += u.numel;
  return total;
}

int64_t ParameterLayout::total_numel() const {
  int64_t total = 0;
  for (const auto& u : units_) total += u.numel;
  return total;
}

std::vector<InitialFill> ParameterLayout::initial_fills(size_t unit_index, int64_t begin, int64_t end) const {
  const ParameterUnit& u = units_.at(unit_index);
  ZB_CHECK(0 <= begin && begin <= end && end <= u.numel, "range [", begin, ", ", end, ") of unit ", u.name);
  std::vector<InitialFill> fills;
  for (size_t t = 0; t < u.tensors.size(); ++t) {
    const ParameterTensor& tensor = u.tensors[t];
    if (tensor.init == InitKind::zeros) continue;
    const int64_t row = tensor.shape.rank() > 1 ? tensor.shape[1] : 1;
    const int64_t first = std::max(begin, tensor.offset);
    const int64_t last = std::min(end, tensor.offset + tensor.initialised_rows * row);
    if (first >= last) continue;
    fills.push_back({first, last - first, tensor.init, tensor.init_std, (u.init_id << 16) | t,
                     first - tensor.offset});
  }
  return fills;
}

void ParameterLayout::initialize(size_t unit_index, uint64_t seed, int64_t begin, int64_t end, float* out) const {
  const std::vector<InitialFill> fills = initial_fills(unit_index, begin, end);  // (checks the range first)
  std::fill(out, out + (end - begin), 0.0f);  // alignment gaps and padding rows stay zero
  for (const InitialFill& fill : fills) {
    float* to = out + (fill.first - begin);
    for (int64_t i = 0; i < fill.count; ++i) {
      to[i] = fill.init == InitKind::ones ? 1.0f : float(fill.std * random_normal(seed, fill.stream, fill.element + i));
    }
  }
}

}  // namespace zb
