// The cpu_optimizer_bench program as a user meets it: a small run prints one line per SIMD level and form of
// the update, and the same bytes moved without AdamW beside them, each with a positive rate; bad input exits
// with code 2 and a message naming the flag.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "support/run_program.h"

namespace zb {
namespace {

using test::run_program;

// The G params/s of the line labelled `label`, or -1 where there is none.
double rate_of(const std::string& output, const std::string& label) {
  const std::regex line(label + R"( +[0-9.]+ ms per step \| +([0-9.]+) G params/s)");
  std::smatch match;
  return std::regex_search(output, match, line) ? std::stod(match[1].str()) : -1.0;
}

TEST(CpuOptimizerBench, PrintsEachFormAndTheSameBytesWithoutAdamW) {
  const auto r = run_program("cpu_optimizer_bench", "--params 200003 --repeats 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* label : {"scalar  in place", "separate output", "aside \\(speculative\\)",
                            "memory  same bytes, no AdamW"}) {
    EXPECT_GT(rate_of(r.output, label), 0.0) << label << "\n" << r.output;
  }
}

TEST(CpuOptimizerBench, BadInputExitsWithCode2) {
  for (const auto& [arguments, message] : {std::pair<std::string, std::string>{"--params 0", "--params: must be in"},
                                           {"--repeats 0", "--repeats: must be in"}}) {
    const auto r = run_program("cpu_optimizer_bench", arguments);
    EXPECT_EQ(r.exit_code, 2) << arguments << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace zb
