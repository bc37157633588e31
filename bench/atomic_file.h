// Result files are written whole or not at all: a temporary file in the same folder, then a rename, so that no
// partial file is ever left where a reader (or a later run's baseline) looks.
#pragma once

#include <string>

namespace zb {

// Writes `text` to `path` through a temporary file in the same folder; throws IoError naming the path.
void write_file_atomically(const std::string& path, const std::string& text);

// Claims a name no run has used: base + extension, else base_2 + extension, base_3, ..., created holding
// `initial_text` only where absent (O_EXCL), so that two runs never share a file, even when they start at once.
// Returns the base claimed (without the extension). Throws IoError where the folder cannot be written.
std::string claim_new_file(const std::string& base, const std::string& extension, const std::string& initial_text);

}  // namespace zb
