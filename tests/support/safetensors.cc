#include "support/safetensors.h"

#include <cstring>
#include <fstream>

#include "core/errors.h"
#include "core/strings.h"

namespace zb::test {

int64_t StoredTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<double> StoredTensor::to_doubles() const {
  std::vector<double> out(numel());
  if (dtype == "F64") {
    std::memcpy(out.data(), bytes.data(), bytes.size());
  } else if (dtype == "F32") {
    std::vector<float> narrow(numel());
    std::memcpy(narrow.data(), bytes.data(), bytes.size());
    out.assign(narrow.begin(), narrow.end());
  } else {
    throw Error(cat("tensor of dtype ", dtype, " is not floating point"));
  }
  return out;
}

std::vector<int32_t> StoredTensor::to_ints() const {
  if (dtype != "I32") throw Error(cat("tensor of dtype ", dtype, " is not I32"));
  std::vector<int32_t> out(numel());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(cat("cannot open '", path, "'"));
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), sizeof header_size);
  std::string header(header_size, '\0');
  if (!in.read(header.data(), std::streamsize(header_size))) throw IoError(cat("'", path, "': truncated header"));
  const auto json = nlohmann::json::parse(header);
  const std::streamoff data_start = std::streamoff(sizeof header_size + header_size);
  for (const auto& [name, entry] : json.items()) {
    if (name == "__metadata__") {
      metadata_ = entry;
      continue;
    }
    StoredTensor t;
    t.dtype = entry.at("dtype").get<std::string>();
    t.shape = entry.at("shape").get<std::vector<int64_t>>();
    const auto offsets = entry.at("data_offsets").get<std::vector<int64_t>>();
    const std::map<std::string, size_t> element_bytes = {{"F32", 4}, {"F64", 8}, {"I32", 4}};
    if (!element_bytes.count(t.dtype) || offsets.at(1) - offsets.at(0) != int64_t(t.numel() * element_bytes.at(t.dtype))) {
      throw IoError(cat("'", path, "': tensor ", name, " has a dtype or byte range that does not fit its shape"));
    }
    t.bytes.resize(offsets.at(1) - offsets.at(0));
    in.seekg(data_start + offsets[0]);
    if (!in.read(t.bytes.data(), std::streamsize(t.bytes.size()))) throw IoError(cat("'", path, "': truncated ", name));
    tensors_.emplace(name, std::move(t));
  }
}

const StoredTensor& SafetensorsFile::at(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(cat("no tensor '", name, "' in the file"));
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

}  // namespace zb::test
