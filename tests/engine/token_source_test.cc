// Token sources: synthetic ids split identically over ranks and micro-batches; llm.c shards and raw files read
// in order; every malformed file refused with a message that says what is wrong.
#include <gtest/gtest.h>

#include <fstream>

#include "core/errors.h"
#include "engine/token_source.h"
#include "support/random_inputs.h"
#include "support/temp_dir.h"
#include "support/token_files.h"

namespace zb {
namespace {

using test::write_shard;

void write_raw(const std::string& path, const std::vector<uint16_t>& ids) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), ids.size() * 2);
}

std::vector<uint16_t> sequence(int n, int start = 0, int vocab = 256) {
  std::vector<uint16_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = uint16_t((start + i) % vocab);
  return ids;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(SyntheticTokens, RanksAndMicroBatchesSplitTheSameSamples) {
  const int64_t seq = 8, vocab = 100;
  auto whole = make_synthetic_tokens({4, seq, 0, 1}, vocab, 3);
  auto rank0 = make_synthetic_tokens({2, seq, 0, 2}, vocab, 3);
  auto rank1 = make_synthetic_tokens({2, seq, 1, 2}, vocab, 3);
  auto micro = make_synthetic_tokens({2, seq, 0, 1}, vocab, 3);
  for (int step = 0; step < 3; ++step) {
    const TokenBatch w = whole->next_batch();
    TokenBatch r0 = rank0->next_batch(), r1 = rank1->next_batch();
    TokenBatch m0 = micro->next_batch(), m1 = micro->next_batch();
    std::vector<int32_t> ranks = r0.inputs, micros = m0.inputs;
    ranks.insert(ranks.end(), r1.inputs.begin(), r1.inputs.end());
    micros.insert(micros.end(), m1.inputs.begin(), m1.inputs.end());
    EXPECT_EQ(ranks, w.inputs) << "step " << step;
    EXPECT_EQ(micros, w.inputs) << "step " << step;
    for (int64_t s = 0; s < 4; ++s)  // targets are the inputs shifted by one within a sample
      for (int64_t t = 0; t + 1 < seq; ++t) EXPECT_EQ(w.targets[s * seq + t], w.inputs[s * seq + t + 1]);
    for (int32_t id : w.inputs) ASSERT_TRUE(id >= 0 && id < vocab);
  }
  auto other_seed = make_synthetic_tokens({4, seq, 0, 1}, vocab, 4);
  auto same_seed = make_synthetic_tokens({4, seq, 0, 1}, vocab, 3);
  EXPECT_NE(other_seed->next_batch().inputs, same_seed->next_batch().inputs);
}

TEST(FileTokens, LlmcShardsAreReadInSortedOrderAndWrapAround) {
  test::TempDir dir;
  write_shard(dir / "train_001.bin", sequence(40, 100));
  write_shard(dir / "train_000.bin", sequence(40, 0));
  auto source = make_file_tokens(dir / "train_*.bin", TokenFileFormat::llmc, {2, 4, 0, 1}, 256);
  // Each shard holds 40 tokens; a batch uses 8 (+1 for the last target): 4 batches per shard.
  for (int b = 0; b < 4; ++b) {
    const TokenBatch batch = source->next_batch();
    EXPECT_EQ(batch.inputs[0], b * 8) << "shard 000 first";
    EXPECT_EQ(batch.targets[7], b * 8 + 8);
  }
  EXPECT_EQ(source->next_batch().inputs[0], 100) << "then shard 001";
  for (int b = 1; b < 4; ++b) source->next_batch();
  EXPECT_EQ(source->next_batch().inputs[0], 0) << "then around again";
}

TEST(FileTokens, RanksReadDisjointSlices) {
  test::TempDir dir;
  write_shard(dir / "a.bin", sequence(100));
  auto r0 = make_file_tokens(dir / "a.bin", TokenFileFormat::llmc, {1, 4, 0, 2}, 256);
  auto r1 = make_file_tokens(dir / "a.bin", TokenFileFormat::llmc, {1, 4, 1, 2}, 256);
  EXPECT_EQ(r0->next_batch().inputs, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(r1->next_batch().inputs, (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(r0->next_batch().inputs, (std::vector<int32_t>{8, 9, 10, 11}));
}

TEST(FileTokens, RawUint16Files) {
  test::TempDir dir;
  write_raw(dir / "tokens.u16", sequence(50, 7));
  auto source = make_file_tokens(dir / "tokens.u16", TokenFileFormat::raw_uint16, {1, 5, 0, 1}, 256);
  EXPECT_EQ(source->next_batch().inputs, (std::vector<int32_t>{7, 8, 9, 10, 11}));
}

TEST(FileTokens, MalformedFilesAreClearErrors) {
  test::TempDir dir;
  const BatchGeometry g{1, 4, 0, 1};
  write_shard(dir / "magic.bin", sequence(20), 12345);
  EXPECT_NE(error_of([&] { make_file_tokens(dir / "magic.bin", TokenFileFormat::llmc, g, 256); }).find("magic 12345"),
            std::string::npos);
  write_shard(dir / "version.bin", sequence(20), 20240520, 2);
  EXPECT_NE(error_of([&] { make_file_tokens(dir / "version.bin", TokenFileFormat::llmc, g, 256); }).find("version 2"),
            std::string::npos);
  write_shard(dir / "short.bin", sequence(20), 20240520, 1, 30);
  EXPECT_NE(error_of([&] { make_file_tokens(dir / "short.bin", TokenFileFormat::llmc, g, 256); }).find("truncated"),
            std::string::npos);
  std::ofstream(dir / "tiny.bin") << "abc";
  EXPECT_NE(error_of([&] { make_file_tokens(dir / "tiny.bin", TokenFileFormat::llmc, g, 256); }).find("truncated"),
            std::string::npos);
  write_shard(dir / "vocab.bin", sequence(20, 0, 1000));
  const std::string vocab = error_of([&] { make_file_tokens(dir / "vocab.bin", TokenFileFormat::llmc, g, 16); });
  EXPECT_NE(vocab.find("id 16 at token 16"), std::string::npos) << vocab;
  std::ofstream(dir / "odd.u16") << "abc";
  EXPECT_NE(error_of([&] { make_file_tokens(dir / "odd.u16", TokenFileFormat::raw_uint16, g, 256); }).find("truncated"),
            std::string::npos);
  write_shard(dir / "few.bin", sequence(4));
  EXPECT_NE(error_of([&] { make_file_tokens(dir / "few.bin", TokenFileFormat::llmc, g, 256); }).find("fewer than one"),
            std::string::npos);
  EXPECT_THROW(make_file_tokens(dir / "nothing*.bin", TokenFileFormat::llmc, g, 256), UsageError);
  EXPECT_THROW(parse_token_file_format("npy"), UsageError);
}

}  // namespace
}  // namespace zb
