// A recorded window as a Chrome trace (the JSON "trace event format" that Perfetto and chrome://tracing open):
// one process per rank, one track per host thread and per device stream, a complete event ("ph": "X") per slice
// with its category, and in "args" what the summary uses: bytes, FLOPs, the achieved rate (GB/s of a copy, bus
// bandwidth of a collective: the CPU backend's, and a GPU's NCCL kernel given its launch's bytes by the
// profiler), the launching operation's id. Times in microseconds on rank 0's clock, so that the
// ranks' traces line up when opened together.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "bench/profile_window.h"

namespace zb {

nlohmann::json chrome_trace(const ProfileWindow& window);

// Writes `text` gzip-compressed to `path` (through a temporary file and a rename, as the results are); throws
// IoError naming the path.
void write_gzip_file(const std::string& path, const std::string& text);
// Reads a gzip-compressed (or plain) file whole; throws IoError naming the path.
std::string read_gzip_file(const std::string& path);

}  // namespace zb
