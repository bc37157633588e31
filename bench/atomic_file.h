// Result files are written whole or not at all: a temporary file in the same folder, then a rename, so that no
// partial file is ever left where a reader (or a later run's baseline) looks.
#pragma once

#include <string>

namespace zb {

// Writes `text` to `path` through a temporary file in the same folder; throws IoError naming the path.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace zb
