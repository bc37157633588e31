// Writes llm.c token shards for tests: a 256 x int32 header (magic, version, token count) and uint16 ids.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace zb::test {

// claimed < 0: the header states the true count; otherwise it claims `claimed` tokens.
inline void write_shard(const std::string& path, const std::vector<uint16_t>& ids, int32_t magic = 20240520,
                        int32_t version = 1, int64_t claimed = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = int32_t(claimed < 0 ? int64_t(ids.size()) : claimed);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), std::streamsize(header.size() * 4));
  out.write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 2));
}

}  // namespace zb::test
