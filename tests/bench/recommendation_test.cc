// The recommendation: the fastest configuration is OPTIMAL unless others are within the noise of the runs
// (a tie), where the simplest of them (no offload, then the lower stage) that fits with room is; failures
// say how and why; the others say how much slower they are and how much memory they take.
#include "bench/recommendation.h"

#include <gtest/gtest.h>

namespace zb {
namespace {

BenchRecord measured(int stage, const std::string& strategy, double tokens_per_sec, double step_ms, double sd_ms,
                     double peak_gb) {
  BenchRecord r;
  r.stage = stage;
  r.strategy = strategy;
  r.throughput_tokens_per_sec = tokens_per_sec;
  r.avg_step_time_ms = step_ms;
  r.step_time_stddev_ms = sd_ms;
  r.gpu_peak_gb = peak_gb;
  return r;
}

TEST(Recommendation, TheFastestWinsWhenItsLeadIsAboveTheNoise) {
  // Stage 3 is 5% faster; the step times vary by 1%.
  std::vector<BenchRecord> records = {measured(1, "none", 100'000, 200, 2, 60),
                                      measured(3, "none", 105'000, 190, 1.9, 40)};
  EXPECT_EQ(recommend(records, 141.0), std::optional<size_t>(1));
  EXPECT_EQ(records[1].recommendation, "OPTIMAL");
  EXPECT_EQ(records[0].recommendation, "4.8% slower, 20 GB more memory");
}

TEST(Recommendation, WithinTheNoiseTheSimplerConfigurationIsRecommended) {
  // Stage 3 is 1.4% faster, but the step times vary by 2%: a tie, and stage 1 is simpler.
  std::vector<BenchRecord> records = {measured(1, "none", 43'396, 189, 3.8, 57),
                                      measured(3, "none", 44'000, 186, 3.7, 39)};
  EXPECT_EQ(recommend(records, 141.0), std::optional<size_t>(0));
  EXPECT_EQ(records[0].recommendation,
            "OPTIMAL (a tie: stage 3 is 1.4% faster, within the step-time spread; this one is simpler)");
  EXPECT_EQ(records[1].recommendation, "1.4% faster, 18 GB less memory; a tie: within the step-time spread (2.0%)");
}

TEST(Recommendation, NoOffloadIsSimplerThanAnyOffloadAndABarelyFittingTieIsPassedOver) {
  // All three within the noise. Stage 0 barely fits a 141 GB GPU; of the others, no offload beats offload.
  std::vector<BenchRecord> records = {measured(0, "none", 10'100, 200, 10, 135),
                                      measured(2, "cpu_optimizer", 10'200, 198, 10, 30),
                                      measured(3, "none", 10'000, 202, 10, 60)};
  EXPECT_EQ(recommend(records, 141.0), std::optional<size_t>(2));
  EXPECT_EQ(records[2].recommendation.rfind("OPTIMAL (a tie: ", 0), 0u) << records[2].recommendation;
  EXPECT_NE(records[0].recommendation.find("barely fits (96% of GPU memory)"), std::string::npos)
      << records[0].recommendation;
}

TEST(Recommendation, WithoutMeasuredSpreadThereIsNoTie) {
  std::vector<BenchRecord> records = {measured(1, "none", 100'000, 200, 0, 60),
                                      measured(2, "none", 100'100, 199.8, 0, 50)};
  EXPECT_EQ(recommend(records, std::nullopt), std::optional<size_t>(1));
}

TEST(Recommendation, FailuresSayHowAndWhy) {
  BenchRecord oom, error, interrupted;
  oom.status = "oom";
  oom.error = "rank 0: out of GPU memory on cuda:0: optimizer_state needs 1.2 GiB more\nsecond line";
  error.status = "error";
  error.error = "nvme: No space left on device";
  interrupted.status = "interrupted";
  std::vector<BenchRecord> records = {oom, error, interrupted};
  EXPECT_EQ(recommend(records, 80.0), std::nullopt);
  EXPECT_EQ(records[0].recommendation,
            "does not fit: rank 0: out of GPU memory on cuda:0: optimizer_state needs 1.2 GiB more");
  EXPECT_EQ(records[1].recommendation, "error: nvme: No space left on device");
  EXPECT_EQ(records[2].recommendation, "not measured: interrupted");
}

}  // namespace
}  // namespace zb
