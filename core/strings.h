// Small string helpers: concatenation of streamable values and joining of lists.
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zb {

template <typename... Parts>
std::string cat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

inline std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string result;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) result += separator;
    result += items[i];
  }
  return result;
}

}  // namespace zb
