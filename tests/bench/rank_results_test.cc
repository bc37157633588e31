// Per-rank results: the step statistics of one rank, the grouping of ranks into hosts (node_throughput), the
// spread over ranks and its flag naming the slow rank and why, the JSON round trip that gathers them, and the
// NVML telemetry's names and behaviour without a GPU.
#include "bench/rank_results.h"

#include <gtest/gtest.h>

#include "bench/gpu_telemetry.h"

namespace zb::test {
namespace {

RankResult rank_on(int rank, const std::string& host, double step_ms, double busy_ms, double tokens_per_sec) {
  RankResult r;
  r.rank = rank;
  r.host = host;
  r.gpu_index = rank % 4;
  r.gpu_name = "NVIDIA H200";
  r.step_ms_mean = r.step_ms_p50 = r.step_ms_p90 = step_ms;
  r.busy_ms = busy_ms;
  r.tokens_per_sec = tokens_per_sec;
  return r;
}

TEST(RankSteps, MeanPercentilesBusyTimeAndTokensOfOneRank) {
  RankSteps steps;
  for (double ms : {100.0, 110.0, 120.0, 130.0, 140.0}) {
    StepStats s;
    s.seconds = ms / 1e3;
    s.comm.exposed_ms = 10;
    s.tokens = 4 * 8192;  // all ranks' tokens
    steps.add(s, 4);
  }
  RankResult r;
  summarise_steps(steps, r);
  EXPECT_DOUBLE_EQ(r.step_ms_mean, 120);
  EXPECT_DOUBLE_EQ(r.step_ms_p50, 120);
  EXPECT_DOUBLE_EQ(r.step_ms_p90, 136);  // between the 4th and 5th of 5, 60% of the way
  EXPECT_DOUBLE_EQ(r.busy_ms, 110);
  EXPECT_DOUBLE_EQ(r.tokens_per_sec, 8192 / 0.120) << "this rank's tokens over its own step time";
}

TEST(RankSteps, WithOffloadTheWaitForTheRanksOwnHostUpdateCountsAsBusy) {
  RankSteps steps;
  StepStats s;
  s.seconds = 0.5;
  s.comm.exposed_ms = 300;         // compute waited for the new weights to come up ...
  s.offload.update_wait_ms = 220;  // ... 220 ms of it for this rank's own CPU optimizer
  s.offload.cpu_ms = 260;
  s.tokens = 2048;
  steps.add(s, 1);
  s.offload.update_wait_ms = 350;  // more than the exposed wait: none of it was for the others
  steps.add(s, 1);
  RankResult r;
  summarise_steps(steps, r);
  EXPECT_DOUBLE_EQ(r.busy_ms, (420.0 + 500.0) / 2);
  EXPECT_DOUBLE_EQ(r.host_update_ms, 260);
}

TEST(NodeThroughput, RanksAreGroupedByHostInTheOrderOfTheirFirstRank) {
  // Round-robin placement (mpirun --map-by node) interleaves the hosts.
  const std::vector<RankResult> ranks = {rank_on(0, "node-b", 100, 90, 1000), rank_on(1, "node-a", 100, 90, 1100),
                                         rank_on(2, "node-b", 100, 90, 1200), rank_on(3, "node-a", 100, 90, 1300),
                                         rank_on(4, "node-c", 100, 90, 1400)};
  const std::vector<NodeThroughput> nodes = node_throughputs(ranks);
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].host, "node-b");
  EXPECT_EQ(nodes[0].ranks, (std::vector<int>{0, 2}));
  EXPECT_DOUBLE_EQ(nodes[0].tokens_per_sec, 2200);
  EXPECT_EQ(nodes[1].host, "node-a");
  EXPECT_EQ(nodes[1].ranks, (std::vector<int>{1, 3}));
  EXPECT_DOUBLE_EQ(nodes[1].tokens_per_sec, 2400);
  EXPECT_EQ(nodes[2].ranks, (std::vector<int>{4}));
}

TEST(RankSpread, OneRankHasNoSpread) {
  const RankSpread s = rank_spread({rank_on(0, "a", 100, 90, 1)});
  EXPECT_EQ(s.step_spread_pct, 0);
  EXPECT_FALSE(s.flagged);
  EXPECT_EQ(s.note, "");
}

TEST(RankSpread, ConsistentRanksAreNotFlagged) {
  // 4% apart in busy time: under the 5% line.
  const RankSpread s = rank_spread({rank_on(0, "a", 100, 96, 1), rank_on(1, "a", 100, 100, 1),
                                    rank_on(2, "a", 101, 98, 1), rank_on(3, "a", 100, 97, 1)});
  EXPECT_NEAR(s.step_spread_pct, 100.0 / 100.25, 1e-9);
  EXPECT_NEAR(s.busy_spread_pct, 400.0 / 97.75, 1e-9);
  EXPECT_EQ(s.slowest_rank, 1);
  EXPECT_EQ(s.fastest_rank, 0);
  EXPECT_FALSE(s.flagged);
  EXPECT_EQ(s.note, "");
}

TEST(RankSpread, ASlowRankIsNamedWithItsClockPowerAndLimits) {
  // The step times are equal (everyone waits for rank 2 in the collectives); rank 2's busy time is not.
  std::vector<RankResult> ranks = {rank_on(0, "node-a", 200, 180, 1), rank_on(1, "node-a", 200, 181, 1),
                                   rank_on(2, "node-b", 200, 194, 1), rank_on(3, "node-b", 200, 182, 1)};
  for (RankResult& r : ranks) {
    r.telemetry.samples = 50;
    r.telemetry.sm_clock_mhz = 1590;
    r.telemetry.power_w = 640;
    r.telemetry.power_limit_w = 700;
  }
  ranks[2].telemetry.sm_clock_mhz = 1410;
  ranks[2].telemetry.power_w = 699.6;
  ranks[2].telemetry.limit_reasons = {{"idle", 0.02}, {"power cap", 0.96}};
  const RankSpread s = rank_spread(ranks);
  EXPECT_EQ(s.step_spread_pct, 0);
  EXPECT_NEAR(s.busy_spread_pct, 100.0 * 14 / 184.25, 1e-9);
  ASSERT_TRUE(s.flagged);
  EXPECT_EQ(s.slowest_rank, 2);
  EXPECT_EQ(s.fastest_rank, 0);
  EXPECT_EQ(s.note,
            "rank 2 is 7.6% slower than rank 0: SM clock 1,410 MHz against 1,590, power 700 W of 700, power cap (96% "
            "of samples), host node-b");
}

TEST(RankSpread, AnOffloadRankIsNamedWithItsHostUpdateFirst) {
  // Four ranks on one host run their CPU optimizers side by side; rank 1's took longest.
  std::vector<RankResult> ranks = {rank_on(0, "a", 432, 373, 1), rank_on(1, "a", 432, 381, 1),
                                   rank_on(2, "a", 432, 357, 1), rank_on(3, "a", 432, 362, 1)};
  const double host_update_ms[] = {361, 372.4, 340.6, 349};
  for (RankResult& r : ranks) {
    r.host_update_ms = host_update_ms[r.rank];
    r.telemetry.samples = 100;
    r.telemetry.sm_clock_mhz = 1965;
  }
  const RankSpread s = rank_spread(ranks);
  ASSERT_TRUE(s.flagged);
  EXPECT_EQ(s.note, "rank 1 is 6.5% slower than rank 2: host update 372 ms against 341, SM clock 1,965 MHz against 1,965");
  const RankResult back = rank_result_from_json(to_json(ranks[1]));
  EXPECT_DOUBLE_EQ(back.host_update_ms, 372.4);
}

TEST(RankSpread, AStepTimeSpreadAloneIsFlaggedToo) {
  const RankSpread s = rank_spread({rank_on(0, "a", 100, 90, 1), rank_on(1, "a", 107, 90, 1)});
  EXPECT_TRUE(s.flagged);
  EXPECT_EQ(s.slowest_rank, 1) << "the busy times are equal: the step times name the slow rank";
  EXPECT_EQ(s.note.rfind("rank 1 is 6.8% slower than rank 0", 0), 0u) << s.note;
}

TEST(RankResultJson, RoundTripsEveryField) {
  RankResult r = rank_on(3, "gpu-node-7", 187.5, 170.25, 10923.5);
  r.step_ms_p50 = 186;
  r.step_ms_p90 = 190.5;
  r.gpu_peak_gb = 61.2;
  r.host_rss_gb = 3.5;
  r.telemetry.samples = 42;
  r.telemetry.sm_clock_mhz = 1545;
  r.telemetry.power_w = 688.5;
  r.telemetry.power_limit_w = 700;
  r.telemetry.limit_reasons = {{"power cap", 0.75}, {"thermal (software)", 0.25}};
  const nlohmann::ordered_json j = to_json(r);
  EXPECT_EQ(j["clock_limit_reasons"]["power cap"], 0.75);
  const RankResult back = rank_result_from_json(nlohmann::ordered_json::parse(j.dump()));
  EXPECT_EQ(to_json(back), j);

  RankResult cpu = rank_on(0, "ci", 10, 9, 100);
  cpu.gpu_index = -1;
  cpu.telemetry.unavailable = "no GPU";
  const nlohmann::ordered_json none = to_json(cpu);
  EXPECT_TRUE(none["sm_clock_mhz_median"].is_null());
  EXPECT_EQ(to_json(rank_result_from_json(nlohmann::ordered_json::parse(none.dump()))), none);
}

TEST(FormatRanks, ALineARankThenTheSpreadAndEachHost) {
  std::vector<RankResult> ranks = {rank_on(0, "a", 100, 90, 5000), rank_on(1, "b", 100, 99, 5000)};
  ranks[0].telemetry.unavailable = "no GPU";
  ranks[1].telemetry.samples = 3;
  ranks[1].telemetry.sm_clock_mhz = 1980;
  ranks[1].telemetry.power_w = 300;
  const std::string text = format_ranks(ranks);
  EXPECT_NE(text.find("\n0 | a | 0 NVIDIA H200 | 100.0 / 100.0 / 100.0 | 90.0 | 5000 | 0.00 | 0.00 | - | - | no GPU\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("| 1,980 | 300 | none\n"), std::string::npos) << text;
  EXPECT_NE(text.find("a: 1 rank(s), 5,000 tok/s | b: 1 rank(s), 5,000 tok/s"), std::string::npos) << text;
  EXPECT_NE(text.find("WARNING: rank 1 is 9.5% slower than rank 0"), std::string::npos) << text;
}

TEST(GpuTelemetry, ClockLimitReasonsAreNamedInBitOrder) {
  EXPECT_EQ(limit_reason_names(0), std::vector<std::string>{});
  EXPECT_EQ(limit_reason_names(0x4 | 0x1), (std::vector<std::string>{"idle", "power cap"}));
  EXPECT_EQ(limit_reason_names(0x8 | 0x20 | 0x40 | 0x80),
            (std::vector<std::string>{"hardware slowdown", "thermal (software)", "thermal (hardware)", "power brake"}));
  EXPECT_EQ(limit_reason_names(1ull << 12), std::vector<std::string>{"reason 0x1000"});
}

// Samples as often as the span was due give the medians and the reasons' shares; far fewer (the driver held
// the readings up) give no figures and say so, rather than a median of a moment nobody chose.
TEST(GpuTelemetry, MediansOfTheSamplesUnlessFarFewerThanDue) {
  const std::vector<TelemetrySample> steady = {{1500, 690, 0x4}, {1530, 695, 0x4}, {1470, 692, 0}, {1515, 700, 0x4}};
  const GpuTelemetrySummary s = summarise_samples(steady, 80.0, 20.0);
  EXPECT_EQ(s.samples, 4);
  EXPECT_EQ(s.sm_clock_mhz, 1507.5);
  EXPECT_EQ(s.power_w, 693.5);
  ASSERT_EQ(s.limit_reasons.size(), 1u);
  EXPECT_EQ(s.limit_reasons[0].name, "power cap");
  EXPECT_DOUBLE_EQ(s.limit_reasons[0].share, 0.75);
  EXPECT_EQ(s.unavailable, "");

  const GpuTelemetrySummary starved = summarise_samples({{1980, 121, 0x1}}, 6100.0, 20.0);
  EXPECT_EQ(starved.samples, 1);
  EXPECT_FALSE(starved.sm_clock_mhz.has_value());
  EXPECT_FALSE(starved.power_w.has_value());
  EXPECT_EQ(starved.unavailable, "only 1 of 305 samples due in 6100 ms: NVML waited on the driver (another program "
                                 "using it?)");
  // A short span has few samples due: one sample of a 60 ms span stands.
  EXPECT_TRUE(summarise_samples({{1980, 121, 0}}, 60.0, 20.0).sm_clock_mhz.has_value());
}

// Starts and stops sampling the GPU at `pci_bus_id` at once.
GpuTelemetrySummary sample_briefly(const std::string& pci_bus_id) {
  GpuTelemetry telemetry(pci_bus_id);
  telemetry.start();
  telemetry.stop();
  return telemetry.summary();
}

TEST(GpuTelemetry, WithoutAGpuItTakesNoSamplesAndSaysWhy) {
  const GpuTelemetrySummary s = sample_briefly("");
  EXPECT_EQ(s.samples, 0);
  EXPECT_FALSE(s.sm_clock_mhz.has_value());
  EXPECT_EQ(s.unavailable, "no GPU");
}

TEST(GpuTelemetry, AnUnknownBusIdTakesNoSamplesAndSaysWhy) {
  const GpuTelemetrySummary s = sample_briefly("0000:ff:1f.7");
  EXPECT_EQ(s.samples, 0);
  // No driver (CI): NVML is not there; a driver: it does not know the id.
  EXPECT_TRUE(s.unavailable.find("NVML") != std::string::npos) << s.unavailable;
}

}  // namespace
}  // namespace zb::test
