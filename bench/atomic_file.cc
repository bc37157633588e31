#include "bench/atomic_file.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = cat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::remove(temporary.c_str());
      throw IoError(cat("cannot write ", temporary));
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw IoError(cat("cannot rename ", temporary, " to ", path));
  }
}

}  // namespace zb
