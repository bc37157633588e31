#include "support/golden_files.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "core/strings.h"
#include "models/hf_config.h"

namespace zb::test {

std::string golden_path(const std::string& model) {
  std::string file = model;
  std::replace(file.begin(), file.end(), '-', '_');
  return std::string(ZB_SOURCE_DIR) + "/tests/reference/golden_" + file + ".safetensors";
}

TransformerConfig golden_config(const SafetensorsFile& file) {
  const auto hf = nlohmann::json::parse(file.metadata().at("hf_config").get<std::string>());
  return config_from_hf_json(hf, file.metadata().at("model").get<std::string>());
}

std::vector<float> golden_unit_values(const SafetensorsFile& file, const std::string& prefix,
                                      const ParameterLayout& layout, size_t u, std::vector<float> flat) {
  for (const ParameterTensor& t : layout.unit(u).tensors) {
    const std::string name = prefix + layout.unit(u).name + "/" + t.name;
    if (!file.has(name)) throw std::runtime_error(cat(name, " is missing from the golden file"));
    const std::vector<double> stored = file.at(name).to_doubles();
    if (int64_t(stored.size()) != t.numel() || t.offset + t.numel() > int64_t(flat.size())) {
      throw std::runtime_error(cat(name, ": ", stored.size(), " values in the golden file, ", t.numel(), " in the layout"));
    }
    std::transform(stored.begin(), stored.end(), flat.begin() + t.offset, [](double v) { return float(v); });
  }
  return flat;
}

std::vector<std::string> golden_tensors_outside(const SafetensorsFile& file, const std::string& prefix,
                                                const ParameterLayout& layout) {
  std::set<std::string> placed;
  for (size_t u = 0; u < layout.units().size(); ++u)
    for (const ParameterTensor& t : layout.unit(u).tensors) placed.insert(prefix + layout.unit(u).name + "/" + t.name);
  std::vector<std::string> outside;
  for (const std::string& name : file.names())
    if (name.rfind(prefix, 0) == 0 && !placed.count(name)) outside.push_back(name);
  return outside;
}

std::vector<float> vocabulary_columns(const std::vector<float>& logits, int64_t rows, int64_t vocab) {
  const int64_t width = rows > 0 ? int64_t(logits.size()) / rows : 0;
  if (width < vocab || width * rows != int64_t(logits.size())) {
    throw std::runtime_error(cat(logits.size(), " logits are not ", rows, " rows of at least ", vocab));
  }
  std::vector<float> out;
  out.reserve(size_t(rows * vocab));
  for (int64_t r = 0; r < rows; ++r) out.insert(out.end(), logits.begin() + r * width, logits.begin() + r * width + vocab);
  return out;
}

TokenBatch GoldenTokens::next_batch() {
  TokenBatch b;
  const int64_t base = step_++ * batch_ * (seq_ + 1);
  for (int64_t s = 0; s < batch_; ++s) {
    const int32_t* row = tokens_.data() + base + s * (seq_ + 1);
    b.inputs.insert(b.inputs.end(), row, row + seq_);
    b.targets.insert(b.targets.end(), row + 1, row + seq_ + 1);
  }
  return b;
}

}  // namespace zb::test
