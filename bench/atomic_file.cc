#include "bench/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

std::string claim_new_file(const std::string& base, const std::string& extension, const std::string& initial_text) {
  for (int attempt = 1; attempt <= 1000; ++attempt) {
    const std::string claimed = attempt == 1 ? base : cat(base, "_", attempt);
    const std::string path = claimed + extension;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      throw IoError(cat("cannot create ", path, ": ", std::strerror(errno)));
    }
    const bool written = ::write(fd, initial_text.data(), initial_text.size()) == ssize_t(initial_text.size());
    ::close(fd);
    if (!written) throw IoError(cat("cannot write ", path));
    return claimed;
  }
  throw IoError(cat("cannot find a free name for ", base, extension));
}

}  // namespace zb
