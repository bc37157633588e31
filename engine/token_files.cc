// Token files: llm.c shards (a 256 x int32 header: magic 20240520, version 1, token count; then uint16 ids)
// or raw uint16 ids. All files are checked for size and header before training starts; each file's ids are
// checked against the vocabulary when it is loaded (the first one before training starts).
#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "core/strings.h"
#include "engine/token_source.h"

namespace zb {

namespace {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int64_t kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

struct Shard {
  std::string path;
  int64_t first_byte = 0;  // where the ids start
  int64_t tokens = 0;
};

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> paths;
  if (rc == 0)
    for (size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
  globfree(&matches);
  if (paths.empty()) throw UsageError(cat("--data: no file matches '", pattern, "'"));
  std::sort(paths.begin(), paths.end());
  return paths;
}

Shard inspect(const std::string& path, TokenFileFormat format) {
  std::error_code ec;
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (ec) throw IoError(cat("token file '", path, "': ", ec.message()));
  if (format == TokenFileFormat::raw_uint16) {
    if (size % 2) throw IoError(cat("token file '", path, "' is truncated: ", size, " bytes is not a whole number of uint16 ids"));
    return {path, 0, size / 2};
  }
  int32_t header[kHeaderInts] = {};
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(header), kHeaderBytes)) {
    throw IoError(cat("token file '", path, "' is truncated: ", size, " bytes, shorter than the ", kHeaderBytes,
                      "-byte llm.c header"));
  }
  if (header[0] != kShardMagic) {
    throw IoError(cat("token file '", path, "' has magic ", header[0], ", not ", kShardMagic,
                      " (an llm.c token shard); for headerless uint16 files use --data-format raw"));
  }
  if (header[1] != kShardVersion) {
    throw IoError(cat("token file '", path, "' is llm.c shard version ", header[1], "; only version ", kShardVersion,
                      " (uint16 ids) is supported"));
  }
  const int64_t tokens = header[2];
  if (tokens < 0 || size < kHeaderBytes + 2 * tokens) {
    throw IoError(cat("token file '", path, "' is truncated: its header promises ", tokens, " tokens (",
                      kHeaderBytes + 2 * tokens, " bytes) but it holds ", size, " bytes"));
  }
  return {path, kHeaderBytes, tokens};
}

class FileTokens final : public TokenSource {
 public:
  FileTokens(const std::string& pattern, TokenFileFormat format, BatchGeometry g, int64_t vocab)
      : pattern_(pattern), g_(g), vocab_(vocab) {
    const int64_t needed = global_stride() + 1;
    for (const auto& path : expand_glob(pattern)) {
      shards_.push_back(inspect(path, format));
      if (shards_.back().tokens < needed) {
        throw IoError(cat("token file '", path, "' holds ", shards_.back().tokens, " tokens, fewer than one global batch ",
                          "needs (", needed, " = ranks x batch x seq + 1)"));
      }
    }
    load(0);
  }

  TokenBatch next_batch() override {
    if (position_ + global_stride() + 1 > int64_t(ids_.size())) {
      load((shard_ + 1) % shards_.size());
    }
    TokenBatch batch;
    const int64_t count = g_.batch * g_.seq;
    const int64_t begin = position_ + int64_t(g_.rank) * count;
    batch.inputs.assign(ids_.begin() + begin, ids_.begin() + begin + count);
    batch.targets.assign(ids_.begin() + begin + 1, ids_.begin() + begin + count + 1);
    position_ += global_stride();
    return batch;
  }

  std::string describe() const override { return cat(shards_.size(), " token file(s) matching '", pattern_, "'"); }

 private:
  int64_t global_stride() const { return int64_t(g_.world) * g_.batch * g_.seq; }

  void load(size_t index) {
    const Shard& s = shards_[index];
    std::vector<uint16_t> raw(s.tokens);
    std::ifstream in(s.path, std::ios::binary);
    in.seekg(s.first_byte);
    if (!in.read(reinterpret_cast<char*>(raw.data()), 2 * s.tokens)) {
      throw IoError(cat("token file '", s.path, "': read failed"));
    }
    ids_.assign(raw.begin(), raw.end());
    for (int64_t i = 0; i < s.tokens; ++i) {
      if (ids_[i] >= vocab_) {
        throw IoError(cat("token file '", s.path, "': id ", ids_[i], " at token ", i, " is outside the model's vocabulary of ",
                          vocab_));
      }
    }
    shard_ = index;
    position_ = 0;
  }

  std::string pattern_;
  BatchGeometry g_;
  int64_t vocab_;
  std::vector<Shard> shards_;
  std::vector<int32_t> ids_;
  size_t shard_ = 0;
  int64_t position_ = 0;
};

}  // namespace

TokenFileFormat parse_token_file_format(const std::string& name) {
  if (name == "llmc") return TokenFileFormat::llmc;
  if (name == "raw") return TokenFileFormat::raw_uint16;
  throw UsageError(cat("--data-format: unknown format '", name, "' (accepted: llmc, raw)"));
}

std::unique_ptr<TokenSource> make_file_tokens(const std::string& glob_pattern, TokenFileFormat format,
                                              BatchGeometry geometry, int64_t vocab) {
  return std::make_unique<FileTokens>(glob_pattern, format, geometry, vocab);
}

}  // namespace zb
