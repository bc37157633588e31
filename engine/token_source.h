// Where training tokens come from: seeded synthetic ids (the default) or token files.
// Every source deals out the same sequence of samples whatever the split: call k on rank r of `world` gets
// samples k * world * batch + r * batch + [0, batch). So data-parallel ranks together, or successive
// micro-batches, see exactly the tokens a single process sees with the larger batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zb {

// One micro-batch for one rank: inputs and next-token targets, int32 [batch * seq] each.
struct TokenBatch {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual TokenBatch next_batch() = 0;
  virtual std::string describe() const = 0;
};

struct BatchGeometry {
  int64_t batch = 1;  // samples per rank
  int64_t seq = 1;
  int rank = 0;
  int world = 1;
};

enum class TokenFileFormat { llmc, raw_uint16 };
TokenFileFormat parse_token_file_format(const std::string& name);  // "llmc" or "raw"; UsageError otherwise

// Uniform ids in [0, vocab), drawn from (seed, sample, position): reproducible and split-independent.
std::unique_ptr<TokenSource> make_synthetic_tokens(BatchGeometry geometry, int64_t vocab, uint64_t seed);

// Tokens read in order from the files matching `glob_pattern` (sorted), wrapping around at the end.
// Throws UsageError when nothing matches, IoError for an unreadable, truncated or malformed file or an id
// outside [0, vocab). Sizes and headers of all files are checked here; each file's ids when it is loaded
// (the first one here, later ones when training reaches them).
std::unique_ptr<TokenSource> make_file_tokens(const std::string& glob_pattern, TokenFileFormat format,
                                              BatchGeometry geometry, int64_t vocab);

}  // namespace zb
