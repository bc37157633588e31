// A reader for the safetensors format (an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the data), used for the golden files written by PyTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zb::test {

struct StoredTensor {
  std::string dtype;  // "F32", "F64" or "I32"
  std::vector<int64_t> shape;
  std::vector<char> bytes;

  int64_t numel() const;
  std::vector<double> to_doubles() const;  // F32 or F64
  std::vector<int32_t> to_ints() const;    // I32
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws zb::IoError
  const StoredTensor& at(const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  std::vector<std::string> names() const;
  // The "__metadata__" entry: string keys to string values.
  const nlohmann::json& metadata() const { return metadata_; }

 private:
  std::map<std::string, StoredTensor> tensors_;
  nlohmann::json metadata_;
};

}  // namespace zb::test
