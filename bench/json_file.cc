#include "bench/json_file.h"

#include <fstream>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

nlohmann::json read_json_file(const std::string& path, const std::string& source) {
  std::ifstream in(path);
  if (!in) throw UsageError(cat(source, ": cannot be read"));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(cat(source, ": not JSON (", e.what(), ")"));
  }
}

}  // namespace zb
