// The aio_bench program as a user meets it: a small grid runs end to end and its JSON holds one record per
// setting with positive rates; bad input is refused with exit code 2 and a message naming the flag, before
// any transfer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "support/run_program.h"
#include "support/temp_dir.h"

namespace zb {
namespace {

using test::run_program;

TEST(AioBench, MeasuresEverySettingAndWritesTheJson) {
  test::TempDir dir;
  const std::string json = dir / "aio_bench.json";
  const auto r = run_program("aio_bench", "--path " + dir.path().string() +
                                              " --bytes 1048576 --block-sizes 65536 262144 --queue-depths 2 4"
                                              " --repeats 1 --json " +
                                              json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("best: write "), std::string::npos) << r.output;
  std::ifstream in(json);
  const nlohmann::json records = nlohmann::json::parse(in);
  ASSERT_EQ(records.size(), 4u) << records.dump(2);
  for (const auto& record : records) {
    EXPECT_GT(record.at("write_gbps_best").get<double>(), 0) << record.dump();
    EXPECT_GT(record.at("read_gbps_best").get<double>(), 0) << record.dump();
    EXPECT_GT(record.at("write_gbps_mean").get<double>(), 0) << record.dump();
    EXPECT_GT(record.at("read_gbps_mean").get<double>(), 0) << record.dump();
  }
  EXPECT_FALSE(std::filesystem::exists(json + ".tmp"));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().string(), json) << "the temporary file is removed";
}

TEST(AioBench, HelpListsEveryFlagWithItsDefault) {
  const auto r = run_program("aio_bench", "--help");
  ASSERT_EQ(r.exit_code, 0);
  for (const char* flag : {"--path", "--bytes", "--block-sizes", "--queue-depths", "--intra-op-parallelism",
                           "--single-submit", "--overlap-events", "--repeats", "--json"})
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  EXPECT_NE(r.output.find("(=2147483648)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(=262144 1048576 4194304 8388608)"), std::string::npos) << r.output;
}

struct BadInput {
  const char* arguments;  // a small, valid run is filled in around them (see small_run)
  const char* expected;   // a part of the message: the flag and what it accepts
};

// `arguments`, with a folder and a small size for any of --path, --bytes and --repeats they leave out, so
// that input wrongly accepted shows up as a quick finished run, not a long one.
std::string small_run(const std::string& arguments, const test::TempDir& dir) {
  std::string run = arguments;
  for (const auto& [flag, value] :
       {std::pair{"--path", dir.path().string()}, std::pair{"--bytes", std::string("65536")},
        std::pair{"--repeats", std::string("1")}})
    if (arguments.find(flag) == std::string::npos) run += std::string(" ") + flag + " " + value;
  return run;
}

class AioBenchBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(AioBenchBadInput, ExitsWithCode2AndNamesTheFlag) {
  test::TempDir dir;
  const auto r = run_program("aio_bench", small_run(GetParam().arguments, dir));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(GetParam().expected), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("best:"), std::string::npos) << "no measurement before the error";
}

INSTANTIATE_TEST_SUITE_P(
    Flags, AioBenchBadInput,
    ::testing::Values(BadInput{"--path ''", "--path: required"},
                      BadInput{"--path /nonexistent-folder", "--path: /nonexistent-folder is not an existing folder"},
                      BadInput{"--bytes 1000", "--bytes: must be a positive multiple of 4096, not 1000"},
                      BadInput{"--bytes 0", "--bytes: must be a positive multiple of 4096"},
                      BadInput{"--block-sizes 4096 5000", "--block-sizes: each value must be a positive multiple"},
                      BadInput{"--queue-depths 0", "--queue-depths: each value must be in [1, 1024], not 0"},
                      BadInput{"--intra-op-parallelism 65", "--intra-op-parallelism: each value must be in [1, 64]"},
                      BadInput{"--repeats 0", "--repeats: must be in [1, 1000], not 0"},
                      BadInput{"--single-submit maybe", "single-submit"},
                      BadInput{"--json /nonexistent-folder/out.json", "--json: folder /nonexistent-folder"}),
    [](const auto& param_info) { return "case" + std::to_string(param_info.index); });

TEST(AioBench, WithoutPathExitsWithCode2) {
  const auto r = run_program("aio_bench", "--bytes 65536 --repeats 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--path: required"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zb
