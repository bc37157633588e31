#include "bench/text_table.h"

#include <algorithm>
#include <cstdio>

namespace zb {

std::string text_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t c = 0; c < rows[i].size(); ++c) {
      std::string cell = rows[i][c];
      if (c + 1 < rows[i].size()) cell.resize(widths[c], ' ');
      out += (c ? " | " : "") + cell;
    }
    out += "\n";
    if (i == 0) {
      for (size_t c = 0; c < widths.size(); ++c) out += (c ? "-|-" : "") + std::string(widths[c], '-');
      out += "\n";
    }
  }
  return out;
}

std::string table_number(const std::optional<double>& value, const char* format) {
  if (!value) return "-";
  char text[48];
  std::snprintf(text, sizeof text, format, *value);
  return text;
}

}  // namespace zb
