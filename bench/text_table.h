// A plain-text table: the first row is the header, a rule of dashes under it, columns padded to their widest cell
// and separated by " | " (the last column unpadded).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace zb {

std::string text_table(const std::vector<std::vector<std::string>>& rows);

// A cell's number, printf-formatted ("%.1f ms"), or "-" where there is none.
std::string table_number(const std::optional<double>& value, const char* format);

}  // namespace zb
