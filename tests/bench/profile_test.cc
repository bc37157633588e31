// The profiler's readings of a recorded window (bench/profile_summary.h, bench/chrome_trace.h) on windows built by
// hand, with every figure worked out from the slices; and the profiler itself (bench/profiler.h) on the host, with
// a communicator of two ranks whose rank 0 reads its clock five seconds ahead of this one's.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_record.h"
#include "bench/chrome_trace.h"
#include "bench/profile_summary.h"
#include "bench/profile_window.h"
#include "bench/profiler.h"
#include "comm/communicator.h"
#include "core/errors.h"
#include "core/trace.h"
#include "support/temp_dir.h"

namespace zb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kNsPerMs = 1'000'000;
constexpr double kTolerance = 1e-9;

TraceLane host(uint32_t id) { return {false, id}; }
TraceLane stream(uint32_t id) { return {true, id}; }

TraceSlice slice(TraceCategory category, TraceLane lane, const std::string& name, double start_ms, double end_ms) {
  TraceSlice s;
  s.category = category;
  s.lane = lane;
  s.name = name;
  s.start_ns = std::llround(start_ms * double(kNsPerMs));
  s.end_ns = std::llround(end_ms * double(kNsPerMs));
  return s;
}

TraceSlice step(const std::string& name, double start_ms, double end_ms) {
  return slice(TraceCategory::step, host(1), name, start_ms, end_ms);
}

// A device kernel (or NCCL kernel) launched by the host scope `by` (0: none).
TraceSlice device(TraceCategory category, uint32_t stream_id, const std::string& name, double start_ms, double end_ms,
                  uint64_t by = 0) {
  TraceSlice s = slice(category, stream(stream_id), name, start_ms, end_ms);
  s.launched_by = by;
  return s;
}

// A host scope that launches device work: an op or a collective with its id, FLOPs and bytes.
TraceSlice launch(TraceCategory category, const std::string& name, double start_ms, double end_ms, uint64_t id,
                  double flops, double bytes) {
  TraceSlice s = slice(category, host(1), name, start_ms, end_ms);
  s.id = id;
  s.flops = flops;
  s.bytes = bytes;
  return s;
}

ProfileWindow window_of(std::vector<TraceSlice> slices, bool ops_run_on_host = false, int world = 1) {
  ProfileWindow w;
  w.config = "stage3";
  w.rank = 1;
  w.world = world;
  w.slices = std::move(slices);
  w.ops_run_on_host = ops_run_on_host;
  w.device_name = ops_run_on_host ? "cpu" : "NVIDIA H200";
  w.lane_names = {{host(1), "main"}, {host(2), "cpu optimizer 0"}, {host(3), "cpu optimizer 1"},
                  {stream(7), "compute"}, {stream(9), "communication"}};
  return w;
}

double exposed(const StepExposure& e, ExposedCategory c) { return e.exposed_ms[size_t(c)]; }

void expect_exposure(const StepExposure& e, double compute, double collectives, double copies, double cpu_optimizer,
                     double nvme, double idle) {
  EXPECT_NEAR(exposed(e, ExposedCategory::compute), compute, kTolerance) << e.name;
  EXPECT_NEAR(exposed(e, ExposedCategory::collectives), collectives, kTolerance) << e.name;
  EXPECT_NEAR(exposed(e, ExposedCategory::copies), copies, kTolerance) << e.name;
  EXPECT_NEAR(exposed(e, ExposedCategory::cpu_optimizer), cpu_optimizer, kTolerance) << e.name;
  EXPECT_NEAR(exposed(e, ExposedCategory::nvme), nvme, kTolerance) << e.name;
  EXPECT_NEAR(exposed(e, ExposedCategory::idle), idle, kTolerance) << e.name;
  double sum = 0;
  for (double ms : e.exposed_ms) sum += ms;
  EXPECT_NEAR(sum, e.step_ms, kTolerance) << e.name << ": the categories sum to the step";
}

const OperationRow* row_named(const ProfileSummary& summary, const std::string& name) {
  for (const OperationRow& r : summary.operations)
    if (r.name == name) return &r;
  return nullptr;
}

std::vector<std::string> row_names(const ProfileSummary& summary) {
  std::vector<std::string> names;
  for (const OperationRow& r : summary.operations) names.push_back(r.name);
  return names;
}

// Step 0..100 ms: a kernel 10..40, an NCCL kernel 30..60, a copy 50..70, the host update 65..90, an NVMe read 85..95.
std::vector<TraceSlice> one_of_each(const std::string& name, double at_ms) {
  return {step(name, at_ms, at_ms + 100),
          device(TraceCategory::kernel, 7, "sm90_gemm", at_ms + 10, at_ms + 40),
          device(TraceCategory::collective, 9, "ncclDevKernel_AllGather_RING_LL", at_ms + 30, at_ms + 60),
          device(TraceCategory::copy, 12, "memcpy HtoD", at_ms + 50, at_ms + 70),
          slice(TraceCategory::cpu_optimizer, host(2), "block.0 adam", at_ms + 65, at_ms + 90),
          slice(TraceCategory::nvme, host(4), "nvme_read", at_ms + 85, at_ms + 95)};
}

// --- summarise: exposure ---

TEST(ProfileSummary, EachMomentOfAStepGoesToTheFirstBusyCategoryInOrder) {
  const ProfileSummary summary = summarise(window_of(one_of_each("ProfilerStep#5", 0)), {});
  ASSERT_EQ(summary.steps.size(), 1u);
  EXPECT_EQ(summary.steps[0].name, "ProfilerStep#5");
  EXPECT_NEAR(summary.steps[0].step_ms, 100, kTolerance);
  // 0-10 idle, 10-40 compute (the collective under it hidden), 40-60 collectives, 60-70 copies (50-60 hidden),
  // 70-90 the host update, 90-95 NVMe, 95-100 idle.
  expect_exposure(summary.steps[0], 30, 20, 10, 20, 5, 15);
  EXPECT_EQ(summary.bottleneck, ExposedCategory::compute);
}

TEST(ProfileSummary, MeanIsOverTheStepsAndTheBottleneckIsItsLargestCategory) {
  std::vector<TraceSlice> slices = one_of_each("ProfilerStep#5", 0);
  // Step 6, 200..260: a kernel 200..230 and a copy 220..250: compute 30, copies 20, idle 10.
  slices.push_back(step("ProfilerStep#6", 200, 260));
  slices.push_back(device(TraceCategory::kernel, 7, "sm90_gemm", 200, 230));
  slices.push_back(device(TraceCategory::copy, 12, "memcpy DtoH", 220, 250));
  const ProfileSummary summary = summarise(window_of(slices), {});
  ASSERT_EQ(summary.steps.size(), 2u);
  EXPECT_EQ(summary.steps[0].name, "ProfilerStep#5");
  EXPECT_EQ(summary.steps[1].name, "ProfilerStep#6");
  expect_exposure(summary.steps[0], 30, 20, 10, 20, 5, 15);
  EXPECT_NEAR(summary.steps[1].step_ms, 60, kTolerance);
  expect_exposure(summary.steps[1], 30, 0, 20, 0, 0, 10);
  EXPECT_EQ(summary.mean.name, "mean");
  EXPECT_NEAR(summary.mean.step_ms, 80, kTolerance);
  expect_exposure(summary.mean, 30, 10, 15, 10, 2.5, 12.5);
  EXPECT_EQ(summary.bottleneck, ExposedCategory::compute);
}

TEST(ProfileSummary, BottleneckMayBeCollectivesOrIdle) {
  // 0..100: collectives 10..60 exposed (50), a kernel 60..70 (10), idle 40.
  const ProfileSummary comm_bound =
      summarise(window_of({step("ProfilerStep#1", 0, 100),
                           device(TraceCategory::collective, 9, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 10, 60),
                           device(TraceCategory::kernel, 7, "gemm", 60, 70)}),
                {});
  expect_exposure(comm_bound.mean, 10, 50, 0, 0, 0, 40);
  EXPECT_EQ(comm_bound.bottleneck, ExposedCategory::collectives);
  // 0..100: a kernel 0..20 and a copy 20..30: idle 70.
  const ProfileSummary idle = summarise(window_of({step("ProfilerStep#1", 0, 100),
                                                   device(TraceCategory::kernel, 7, "gemm", 0, 20),
                                                   device(TraceCategory::copy, 7, "memset", 20, 30)}),
                                        {});
  expect_exposure(idle.mean, 20, 0, 10, 0, 0, 70);
  EXPECT_EQ(idle.bottleneck, ExposedCategory::idle);
}

TEST(ProfileSummary, OnAGpuHostOpAndCollectiveSlicesAreLaunchesNotWork) {
  std::vector<TraceSlice> slices = {step("ProfilerStep#1", 0, 10),
                                    launch(TraceCategory::op, "matmul_forward", 2, 8, 5, 1e9, 1e6),
                                    launch(TraceCategory::collective, "all_reduce", 3, 9, 6, 0, 1e6),
                                    slice(TraceCategory::unit, host(1), "block.0 forward", 1, 9),
                                    slice(TraceCategory::wait, host(1), "synchronize", 9, 10)};
  const ProfileSummary summary = summarise(window_of(slices, /*ops_run_on_host=*/false), {});
  ASSERT_EQ(summary.steps.size(), 1u);
  expect_exposure(summary.steps[0], 0, 0, 0, 0, 0, 10);
  EXPECT_TRUE(summary.operations.empty()) << ::testing::PrintToString(row_names(summary));
  EXPECT_EQ(summary.bottleneck, ExposedCategory::idle);
}

TEST(ProfileSummary, OnTheCpuBackendHostOpsAreComputeCollectivesCollectivesAndCopiesCopies) {
  std::vector<TraceSlice> slices = {step("ProfilerStep#1", 0, 10),
                                    slice(TraceCategory::unit, host(1), "block.0 forward", 0, 10),
                                    launch(TraceCategory::op, "matmul_forward", 1, 4, 5, 3e9, 0),
                                    launch(TraceCategory::collective, "all_reduce", 4, 7, 6, 0, 6e6),
                                    slice(TraceCategory::copy, host(1), "copy", 7, 8),
                                    slice(TraceCategory::wait, host(1), "wait_for_host_update", 8, 10)};
  const ProfileSummary summary = summarise(window_of(slices, /*ops_run_on_host=*/true, /*world=*/2), {});
  ASSERT_EQ(summary.steps.size(), 1u);
  expect_exposure(summary.steps[0], 3, 3, 1, 0, 0, 3);
  ASSERT_EQ(summary.operations.size(), 3u) << ::testing::PrintToString(row_names(summary));
  const OperationRow* op = row_named(summary, "matmul_forward");
  const OperationRow* collective = row_named(summary, "all_reduce");
  const OperationRow* copy = row_named(summary, "copy");
  ASSERT_TRUE(op && collective && copy);
  EXPECT_EQ(op->category, "compute");
  EXPECT_EQ(op->calls, 1);
  EXPECT_NEAR(op->total_ms, 3, kTolerance);
  EXPECT_NEAR(op->flops_per_second, 1e12, 1e-3);  // 3e9 FLOPs in 3 ms
  EXPECT_EQ(collective->category, "collectives");
  EXPECT_NEAR(collective->bytes_per_second, 2e9, 1e-3);      // 6e6 bytes in 3 ms
  EXPECT_NEAR(collective->bus_bytes_per_second, 2e9, 1e-3);  // all_reduce over 2 ranks: 2(n-1)/n = 1
  EXPECT_EQ(copy->category, "copies");
  EXPECT_NEAR(copy->total_ms, 1, kTolerance);
}

// --- summarise: operations ---

// One step 0..100 ms on a GPU of a 4-rank job.
//   matmul_forward (ids 11, 12; 4e9 FLOPs and 1e6 bytes each): kernels 10..20 (stream 7) and 15..25 (stream 8) of
//     id 11, 30..35 of id 12: 2 calls, union 15 + 5 = 20 ms.
//   all_gather (id 21, 8e6 bytes): an NCCL kernel 82..90: 8 ms, 1e9 B/s, bus 7.5e8 B/s.
//   layernorm_forward (id 31, 5e9 bytes): a kernel 91..96: 5 ms, 1e12 B/s.
//   elementwise_kernel (no launcher) 40..44; orphan_kernel (launched by an id no slice has) 45..48.
//   the host update on two threads 50..70 and 60..80: one row, 30 ms of wall time.
ProfileWindow operations_window() {
  std::vector<TraceSlice> slices = {
      step("ProfilerStep#5", 0, 100),
      launch(TraceCategory::op, "matmul_forward", 1, 2, 11, 4e9, 1e6),
      launch(TraceCategory::op, "matmul_forward", 2, 3, 12, 4e9, 1e6),
      launch(TraceCategory::op, "layernorm_forward", 3, 4, 31, 0, 5e9),
      launch(TraceCategory::collective, "all_gather", 81, 82, 21, 0, 8e6),
      device(TraceCategory::kernel, 7, "sm90_gemm_a", 10, 20, 11),
      device(TraceCategory::kernel, 8, "sm90_gemm_b", 15, 25, 11),
      device(TraceCategory::kernel, 7, "sm90_gemm_a", 30, 35, 12),
      device(TraceCategory::kernel, 7, "elementwise_kernel", 40, 44),
      device(TraceCategory::kernel, 7, "orphan_kernel", 45, 48, 999),
      slice(TraceCategory::cpu_optimizer, host(2), "block.0 adam", 50, 70),
      slice(TraceCategory::cpu_optimizer, host(3), "block.1 adam", 60, 80),
      device(TraceCategory::collective, 9, "ncclDevKernel_AllGather_RING_LL", 82, 90, 21),
      device(TraceCategory::kernel, 7, "layernorm_kernel", 91, 96, 31),
  };
  return window_of(std::move(slices), /*ops_run_on_host=*/false, /*world=*/4);
}

DeviceCeilings test_ceilings() { return {1e12, 2e12, "test"}; }

TEST(ProfileSummary, OperationsAreSortedByTotalTimeLargestFirst) {
  const ProfileSummary summary = summarise(operations_window(), test_ceilings());
  EXPECT_EQ(row_names(summary), (std::vector<std::string>{"cpu_optimizer", "matmul_forward", "all_gather",
                                                          "layernorm_forward", "elementwise_kernel", "orphan_kernel"}));
  // Compute: 10..25, 30..35, 40..44, 45..48, 91..96 = 32; collectives 82..90 = 8; the host update 50..80 = 30.
  ASSERT_EQ(summary.steps.size(), 1u);
  expect_exposure(summary.steps[0], 32, 8, 0, 30, 0, 30);
}

TEST(ProfileSummary, KernelsOfOneOpAreOneRowWithTheUnionOfTheirTimeAndTheOpsWork) {
  const ProfileSummary summary = summarise(operations_window(), test_ceilings());
  const OperationRow* r = row_named(summary, "matmul_forward");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(row_named(summary, "sm90_gemm_a"), nullptr) << "a launched kernel is its op's";
  EXPECT_EQ(row_named(summary, "sm90_gemm_b"), nullptr);
  EXPECT_EQ(r->category, "compute");
  EXPECT_EQ(r->calls, 2) << "two launching scopes (three kernels)";
  EXPECT_NEAR(r->total_ms, 20, kTolerance) << "10..25 on two streams counts once, plus 30..35";
  EXPECT_NEAR(r->mean_ms, 10, kTolerance);
  EXPECT_NEAR(r->share_of_steps, 0.2, kTolerance);
  EXPECT_NEAR(r->flops_per_second, 4e11, 1e-2) << "8e9 FLOPs (once per scope) in 20 ms";
  EXPECT_NEAR(r->bytes_per_second, 1e8, 1e-6) << "2e6 bytes in 20 ms";
  EXPECT_NEAR(r->share_of_ceiling, 0.4, kTolerance);
  EXPECT_EQ(r->bus_bytes_per_second, 0);
}

TEST(ProfileSummary, AnOpWithBytesOnlyIsSetAgainstTheBandwidthCeiling) {
  const ProfileSummary summary = summarise(operations_window(), test_ceilings());
  const OperationRow* r = row_named(summary, "layernorm_forward");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->calls, 1);
  EXPECT_NEAR(r->total_ms, 5, kTolerance);
  EXPECT_EQ(r->flops_per_second, 0);
  EXPECT_NEAR(r->bytes_per_second, 1e12, 1e-1);
  EXPECT_NEAR(r->share_of_ceiling, 0.5, kTolerance);
}

TEST(ProfileSummary, KernelsNoKnownScopeLaunchedAreRowsOfTheirOwn) {
  const ProfileSummary summary = summarise(operations_window(), test_ceilings());
  const OperationRow* lone = row_named(summary, "elementwise_kernel");
  const OperationRow* orphan = row_named(summary, "orphan_kernel");
  ASSERT_TRUE(lone && orphan);
  EXPECT_EQ(lone->category, "compute");
  EXPECT_EQ(lone->calls, 1);
  EXPECT_NEAR(lone->total_ms, 4, kTolerance);
  EXPECT_NEAR(lone->mean_ms, 4, kTolerance);
  EXPECT_NEAR(lone->share_of_steps, 0.04, kTolerance);
  EXPECT_EQ(lone->flops_per_second, 0);
  EXPECT_EQ(lone->share_of_ceiling, -1) << "its work is not known";
  EXPECT_EQ(orphan->calls, 1);
  EXPECT_NEAR(orphan->total_ms, 3, kTolerance);
}

TEST(ProfileSummary, HostUpdateThreadsAreOneRowOfWallTime) {
  const ProfileSummary summary = summarise(operations_window(), test_ceilings());
  const OperationRow* r = row_named(summary, "cpu_optimizer");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(row_named(summary, "block.0 adam"), nullptr);
  EXPECT_EQ(r->category, "cpu_optimizer");
  EXPECT_EQ(r->calls, 2);
  EXPECT_NEAR(r->total_ms, 30, kTolerance) << "50..70 and 60..80 on two threads";
  EXPECT_NEAR(r->mean_ms, 15, kTolerance);
  EXPECT_NEAR(r->share_of_steps, 0.3, kTolerance);
  EXPECT_EQ(r->share_of_ceiling, -1);
}

TEST(ProfileSummary, CollectiveRowHasNcclBusBandwidthOverTheWindowsRanks) {
  const ProfileSummary summary = summarise(operations_window(), test_ceilings());
  const OperationRow* r = row_named(summary, "all_gather");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->category, "collectives");
  EXPECT_EQ(r->calls, 1);
  EXPECT_NEAR(r->total_ms, 8, kTolerance);
  EXPECT_NEAR(r->bytes_per_second, 1e9, 1e-3) << "8e6 bytes in 8 ms";
  EXPECT_NEAR(r->bus_bytes_per_second, 7.5e8, 1e-3) << "all_gather over 4 ranks: 3/4";
  EXPECT_EQ(r->share_of_ceiling, -1) << "a collective is not set against the device's memory bandwidth";
}

TEST(ProfileSummary, CollectiveRowNamesItsKindWhereItsKernelsNameDoesNot) {
  // NCCL names many of its kernels without the collective ("ncclDevKernel_Generic"); the row is named by the
  // launching scope, "all_gather", which tells the kind.
  const ProfileSummary summary =
      summarise(window_of({step("ProfilerStep#5", 0, 100),
                           launch(TraceCategory::collective, "all_gather", 1, 2, 21, 0, 8e6),
                           device(TraceCategory::collective, 9, "ncclDevKernel_Generic", 10, 18, 21)},
                          false, 4),
                {});
  const OperationRow* r = row_named(summary, "all_gather");
  ASSERT_NE(r, nullptr);
  EXPECT_NEAR(r->bytes_per_second, 1e9, 1e-3);
  EXPECT_NEAR(r->bus_bytes_per_second, 7.5e8, 1e-3) << "all_gather over 4 ranks: 3/4";
}

TEST(ProfileSummary, RowsCountOnlyTheirTimeInsideTheSteps) {
  const ProfileSummary summary =
      summarise(window_of({step("ProfilerStep#5", 0, 100),
                           device(TraceCategory::kernel, 7, "before_kernel", -20, -10),
                           device(TraceCategory::kernel, 7, "after_kernel", 120, 130),
                           device(TraceCategory::kernel, 7, "straddles_start", -5, 3),
                           device(TraceCategory::kernel, 7, "straddles_end", 95, 110)}),
                {});
  EXPECT_EQ(row_names(summary), (std::vector<std::string>{"straddles_end", "straddles_start"}));
  const OperationRow* start = row_named(summary, "straddles_start");
  const OperationRow* end = row_named(summary, "straddles_end");
  ASSERT_TRUE(start && end);
  EXPECT_NEAR(start->total_ms, 3, kTolerance);
  EXPECT_NEAR(end->total_ms, 5, kTolerance);
  EXPECT_NEAR(end->share_of_steps, 0.05, kTolerance);
  expect_exposure(summary.steps.at(0), 8, 0, 0, 0, 0, 92);
}

TEST(ProfileSummary, RowsDoNotCountTimeBetweenTwoSteps) {
  // Steps 0..100 and 200..300: 100..200 is in neither ("slices, clipped to the steps").
  const ProfileSummary summary =
      summarise(window_of({step("ProfilerStep#5", 0, 100), step("ProfilerStep#6", 200, 300),
                           device(TraceCategory::kernel, 7, "between_steps", 120, 150),
                           device(TraceCategory::kernel, 7, "across_the_gap", 90, 210)}),
                {});
  EXPECT_EQ(row_named(summary, "between_steps"), nullptr) << "it ran in no step";
  const OperationRow* across = row_named(summary, "across_the_gap");
  ASSERT_NE(across, nullptr);
  EXPECT_NEAR(across->total_ms, 20, kTolerance) << "90..100 and 200..210";
  EXPECT_LE(across->share_of_steps, 1.0);
  EXPECT_NEAR(across->share_of_steps, 0.1, kTolerance) << "20 ms of 200 ms of steps";
}

TEST(ProfileSummary, WindowWithoutStepsHasAnEmptySummary) {
  const ProfileSummary summary = summarise(window_of({device(TraceCategory::kernel, 7, "gemm", 0, 10)}), {});
  EXPECT_TRUE(summary.steps.empty());
  EXPECT_TRUE(summary.operations.empty());
}

// --- bus_bandwidth_factor ---

TEST(BusBandwidthFactor, FollowsNcclsFormulasByTheCollectivesName) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("reduce_scatter", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("ncclDevKernel_AllGather_RING_LL", 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("broadcast", 4), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("ncclDevKernel_Broadcast_RING_LL", 3), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("send_recv", 4), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("matmul_forward", 4), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("", 4), 0.0);
}

TEST(BusBandwidthFactor, OneRankMovesNothingOverTheBus) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("all_reduce", 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("all_gather", 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("reduce_scatter", 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("all_reduce", 0), 0.0);
}

// --- format_summary ---

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

std::string line_starting(const std::string& text, const std::string& start) {
  for (const std::string& line : lines_of(text))
    if (line.rfind(start, 0) == 0) return line;
  return "";
}

TEST(FormatSummary, ShowsTheHeaderTheFirstRowsTheRestTheStepsAndTheBottleneck) {
  const ProfileWindow window = operations_window();
  const ProfileSummary summary = summarise(window, test_ceilings());
  const std::string text = format_summary(window, summary, test_ceilings(), 3);
  EXPECT_EQ(lines_of(text).at(0), "profile of stage3, rank 1 of 4, on NVIDIA H200: 1 recorded step(s)");
  EXPECT_NE(text.find("device ceilings (measured: test): 1.0 TFLOP/s, 2.0 TB/s"), std::string::npos) << text;
  for (const char* shown : {"cpu_optimizer", "matmul_forward", "all_gather"})
    EXPECT_FALSE(line_starting(text, shown).empty()) << shown << "\n" << text;
  for (const char* summed : {"layernorm_forward", "elementwise_kernel", "orphan_kernel"})
    EXPECT_EQ(text.find(summed), std::string::npos) << summed << "\n" << text;
  // The rest: 3 calls, 5 + 4 + 3 ms, 12% of the step.
  EXPECT_EQ(words_of(line_starting(text, "(the rest)")),
            (std::vector<std::string>{"(the", "rest)", "3", "12.000", "12.0%"}))
      << text;
  EXPECT_EQ(words_of(line_starting(text, "matmul_forward")),
            (std::vector<std::string>{"matmul_forward", "compute", "2", "20.000", "10.0000", "20.0%", "400.0",
                                      "GFLOP/s", "40%"}))
      << text;
  EXPECT_EQ(words_of(line_starting(text, "all_gather")),
            (std::vector<std::string>{"all_gather", "collectives", "1", "8.000", "8.0000", "8.0%", "750.0", "MB/s",
                                      "bus"}))
      << text;
  const std::vector<std::string> expected_step = {"32.000", "8.000", "0.000", "30.000", "0.000", "30.000"};
  for (const char* name : {"ProfilerStep#5", "mean"}) {
    std::vector<std::string> words = words_of(line_starting(text, name));
    ASSERT_EQ(words.size(), 8u) << name << "\n" << text;
    EXPECT_EQ(words[1], "100.000") << name;
    EXPECT_EQ(std::vector<std::string>(words.begin() + 2, words.end()), expected_step) << name;
  }
  EXPECT_NE(text.find("\nbottleneck: compute (32% of the mean step exposed)\n"), std::string::npos) << text;
}

TEST(FormatSummary, ShowsEveryRowAndNoRestWhenTheyFit) {
  const ProfileWindow window = operations_window();
  const ProfileSummary summary = summarise(window, test_ceilings());
  const std::string text = format_summary(window, summary, test_ceilings());
  for (const OperationRow& r : summary.operations)
    EXPECT_FALSE(line_starting(text, r.name).empty()) << r.name << "\n" << text;
  EXPECT_EQ(text.find("(the rest)"), std::string::npos) << text;
}

// --- chrome_trace ---

// Rank 3 of 4 on a GPU; times in ns from 1 s so that microseconds are exact.
ProfileWindow trace_window() {
  const auto at = [](TraceCategory c, TraceLane lane, const std::string& name, int64_t start_ns, int64_t end_ns) {
    TraceSlice s;
    s.category = c;
    s.lane = lane;
    s.name = name;
    s.start_ns = start_ns;
    s.end_ns = end_ns;
    return s;
  };
  ProfileWindow w;
  w.config = "stage3";
  w.rank = 3;
  w.world = 4;
  w.device_name = "NVIDIA H200";
  w.lane_names = {{host(1), "main"},        {host(2), "cpu optimizer 10"}, {host(3), "cpu optimizer 2"},
                  {host(4), "nvme"},        {host(5), "never used"},       {stream(7), "communication"},
                  {stream(8), "compute"},   {stream(12), "copies"}};
  w.slices.push_back(at(TraceCategory::step, host(1), "ProfilerStep#5", 1'000'000'000, 1'100'000'000));
  TraceSlice op = at(TraceCategory::op, host(1), "matmul_forward", 1'000'100'000, 1'000'150'500);
  op.id = 42;
  op.flops = 2e9;
  op.bytes = 3e6;
  w.slices.push_back(op);
  TraceSlice kernel = at(TraceCategory::kernel, stream(8), "sm90_gemm", 1'000'200'000, 1'001'200'000);
  kernel.launched_by = 42;
  kernel.detail = "grid [4,1,1] block [128,1,1]";
  w.slices.push_back(kernel);
  w.slices.push_back(at(TraceCategory::cpu_optimizer, host(2), "block.1 adam", 1'010'000'000, 1'020'000'000));
  w.slices.push_back(at(TraceCategory::cpu_optimizer, host(3), "block.0 adam", 1'010'000'000, 1'015'000'000));
  TraceSlice nvme = at(TraceCategory::nvme, host(4), "nvme_read", 1'020'000'000, 1'030'000'000);
  nvme.bytes = 1e6;
  w.slices.push_back(nvme);
  TraceSlice copy = at(TraceCategory::copy, stream(12), "memcpy", 1'002'000'000, 1'004'000'000);
  copy.bytes = 3e6;  // in 2 ms: 1.5 GB/s
  copy.detail = "HtoD pinned";
  w.slices.push_back(copy);
  TraceSlice nccl = at(TraceCategory::collective, stream(7), "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1'040'000'000,
                       1'044'000'000);
  nccl.bytes = 8e6;  // in 4 ms over 4 ranks: 2 GB/s times 1.5 = 3 GB/s on the bus
  w.slices.push_back(nccl);
  w.slices.push_back(at(TraceCategory::kernel, stream(3), "elementwise", 1'050'000'000, 1'050'000'001));
  return w;
}

std::vector<json> events_with(const json& trace, const std::string& ph, const std::string& name = "") {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == ph && (name.empty() || e.at("name") == name)) out.push_back(e);
  return out;
}

const json& x_event(const std::vector<json>& events, const std::string& name) {
  static const json kNone;
  for (const json& e : events)
    if (e.at("name") == name) return e;
  ADD_FAILURE() << "no X event " << name;
  return kNone;
}

TEST(ChromeTrace, NamesTheRankAsItsProcess) {
  const json trace = chrome_trace(trace_window());
  const std::vector<json> process = events_with(trace, "M", "process_name");
  ASSERT_EQ(process.size(), 1u);
  EXPECT_EQ(process[0].at("pid"), 3);
  EXPECT_EQ(process[0].at("args").at("name"), "rank 3");
  EXPECT_EQ(trace.at("otherData").at("configuration"), "stage3");
  EXPECT_EQ(trace.at("otherData").at("rank"), 3);
  EXPECT_EQ(trace.at("otherData").at("world"), 4);
  EXPECT_EQ(trace.at("otherData").at("device"), "NVIDIA H200");
}

TEST(ChromeTrace, NamesAndOrdersEveryLaneThatHoldsSlices) {
  const json trace = chrome_trace(trace_window());
  std::map<int64_t, std::string> names;
  for (const json& e : events_with(trace, "M", "thread_name")) {
    EXPECT_EQ(e.at("pid"), 3);
    EXPECT_TRUE(names.emplace(e.at("tid").get<int64_t>(), e.at("args").at("name").get<std::string>()).second);
  }
  const std::map<int64_t, std::string> expected_names = {
      {1, "main"},           {2, "cpu optimizer 10"}, {3, "cpu optimizer 2"},  {4, "nvme"},
      {1'000'003, "stream 3"}, {1'000'007, "communication"}, {1'000'008, "compute"}, {1'000'012, "copies"}};
  EXPECT_EQ(names, expected_names) << "host 5 holds no slice; stream 3 has no name";
  std::map<int64_t, int64_t> sort_index;
  for (const json& e : events_with(trace, "M", "thread_sort_index"))
    sort_index[e.at("tid").get<int64_t>()] = e.at("args").at("sort_index").get<int64_t>();
  // main, then the others by name with numbers as numbers; compute, communication, the named, the unnamed by id.
  const std::vector<int64_t> expected_order = {1, 3, 2, 4, 1'000'008, 1'000'007, 1'000'012, 1'000'003};
  ASSERT_EQ(sort_index.size(), expected_order.size());
  for (size_t i = 0; i < expected_order.size(); ++i)
    EXPECT_EQ(sort_index.at(expected_order[i]), int64_t(i)) << "track " << expected_order[i];
  const std::vector<TraceLane> lanes = ordered_lanes(trace_window());
  EXPECT_EQ(lanes, (std::vector<TraceLane>{host(1), host(3), host(2), host(4), stream(8), stream(7), stream(12),
                                           stream(3)}));
}

// CUPTI calls the streams nobody named "stream N": they come after the named ones, by number.
TEST(ChromeTrace, StreamsNamedOnlyByTheirNumberComeLast) {
  ProfileWindow w;
  w.slices = {slice(TraceCategory::kernel, stream(2), "a", 0, 1), slice(TraceCategory::kernel, stream(9), "b", 0, 1),
              slice(TraceCategory::kernel, stream(5), "c", 0, 1), slice(TraceCategory::kernel, stream(4), "d", 0, 1)};
  w.lane_names = {{stream(2), "stream 2"}, {stream(9), "weight gradients"}, {stream(5), "compute"},
                  {stream(4), "update aside"}};
  EXPECT_EQ(ordered_lanes(w), (std::vector<TraceLane>{stream(5), stream(4), stream(9), stream(2)}));
}

TEST(ChromeTrace, UnnamedLanesAreThreadOrStreamByNumber) {
  ProfileWindow w;
  w.slices = {slice(TraceCategory::op, host(5), "a", 0, 1), slice(TraceCategory::kernel, stream(2), "b", 0, 1)};
  const json trace = chrome_trace(w);
  std::map<int64_t, std::string> names;
  for (const json& e : events_with(trace, "M", "thread_name"))
    names[e.at("tid").get<int64_t>()] = e.at("args").at("name").get<std::string>();
  EXPECT_EQ(names, (std::map<int64_t, std::string>{{5, "thread 5"}, {1'000'002, "stream 2"}}));
}

TEST(ChromeTrace, EverySliceIsACompleteEventInMicrosecondsWithItsArgs) {
  const ProfileWindow window = trace_window();
  const json trace = chrome_trace(window);
  const std::vector<json> x = events_with(trace, "X");
  ASSERT_EQ(x.size(), window.slices.size());
  for (const TraceSlice& s : window.slices) {
    const json& e = x_event(x, s.name);
    EXPECT_EQ(e.at("cat"), trace_category_name(s.category)) << s.name;
    EXPECT_EQ(e.at("pid"), 3) << s.name;
    EXPECT_EQ(e.at("tid").get<int64_t>(), s.lane.device ? 1'000'000 + int64_t(s.lane.id) : int64_t(s.lane.id));
    EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), double(s.start_ns) / 1e3) << s.name;
    EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), double(s.end_ns - s.start_ns) / 1e3) << s.name;
  }
  const json& step_event = x_event(x, "ProfilerStep#5");
  EXPECT_DOUBLE_EQ(step_event.at("ts").get<double>(), 1'000'000.0);
  EXPECT_DOUBLE_EQ(step_event.at("dur").get<double>(), 100'000.0);
  EXPECT_TRUE(step_event.at("args").empty());
  const json& op = x_event(x, "matmul_forward");
  EXPECT_DOUBLE_EQ(op.at("ts").get<double>(), 1'000'100.0);
  EXPECT_DOUBLE_EQ(op.at("dur").get<double>(), 50.5);
  EXPECT_EQ(op.at("args"), (json{{"bytes", 3e6}, {"flops", 2e9}, {"id", 42}}));
  const json& kernel = x_event(x, "sm90_gemm");
  EXPECT_EQ(kernel.at("cat"), "kernel");
  EXPECT_EQ(kernel.at("args"), (json{{"detail", "grid [4,1,1] block [128,1,1]"}, {"launched_by", 42}}));
  EXPECT_DOUBLE_EQ(x_event(x, "elementwise").at("dur").get<double>(), 0.001);
  EXPECT_TRUE(x_event(x, "elementwise").at("args").empty());
  EXPECT_EQ(x_event(x, "nvme_read").at("args"), (json{{"bytes", 1e6}}));
}

TEST(ChromeTrace, CopiesShowGigabytesPerSecondAndCollectivesBusBandwidth) {
  const json trace = chrome_trace(trace_window());
  const std::vector<json> x = events_with(trace, "X");
  const json& copy = x_event(x, "memcpy").at("args");
  EXPECT_NEAR(copy.at("GB/s").get<double>(), 1.5, 1e-12);
  EXPECT_EQ(copy.at("bytes").get<double>(), 3e6);
  EXPECT_EQ(copy.at("detail"), "HtoD pinned");
  EXPECT_FALSE(copy.contains("bus GB/s"));
  const json& nccl = x_event(x, "ncclDevKernel_AllReduce_Sum_f32_RING_LL").at("args");
  EXPECT_NEAR(nccl.at("bus GB/s").get<double>(), 3.0, 1e-12);
  EXPECT_FALSE(nccl.contains("GB/s"));
  EXPECT_FALSE(x_event(x, "nvme_read").at("args").contains("GB/s"));
}

// --- gzip files ---

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(GzipFile, RoundTripsThroughARealGzipFile) {
  test::TempDir dir;
  const std::string path = dir / "trace.json.gz";
  std::string text = "{\"traceEvents\": []}\n";
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + "\n";
  write_gzip_file(path, text);
  const std::string raw = file_bytes(path);
  ASSERT_GE(raw.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(raw[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>(raw[1]), 0x8b);
  EXPECT_LT(raw.size(), text.size()) << "compressed";
  EXPECT_EQ(read_gzip_file(path), text);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  write_gzip_file(dir / "empty.gz", "");
  EXPECT_EQ(read_gzip_file(dir / "empty.gz"), "");
}

TEST(GzipFile, ReadingAMissingFileThrowsIoError) {
  test::TempDir dir;
  EXPECT_THROW(read_gzip_file(dir / "missing.json.gz"), IoError);
  EXPECT_THROW(write_gzip_file(dir / "no_such_folder/trace.json.gz", "x"), IoError);
}

// --- Profiler ---

// Rank 1 of 2: barriers return at once, and rank 0's clock reads `rank0_ns` (this rank contributes 0).
class ClockCommunicator final : public Communicator {
 public:
  explicit ClockCommunicator(double rank0_ns) : rank0_ns_(rank0_ns) {}
  int rank() const override { return 1; }
  int size() const override { return 2; }
  std::string describe() const override { return "test, 2 ranks"; }
  CommTicket all_reduce_sum(Tensor&) override { return 0; }
  CommTicket reduce_scatter_sum(const Tensor&, Tensor&) override { return 0; }
  CommTicket all_gather(const Tensor&, Tensor&) override { return 0; }
  CommTicket broadcast(Tensor&, int) override { return 0; }
  void wait(CommTicket) override {}
  CommTicket copy(const Tensor&, Tensor&) override { return 0; }
  void host_wait(CommTicket) override {}
  void after_issued(std::function<void()> done) override { done(); }
  double sum_over_ranks(double value) override {
    contributed.push_back(value);
    return rank0_ns_;
  }
  bool all_ok(bool ok) override { return ok; }
  void barrier() override { ++barriers; }

  std::vector<double> contributed;
  int barriers = 0;

 private:
  double rank0_ns_;
};

constexpr const char* kSchedule = "skip_first=2,wait=1,warmup=1,active=2,repeat=2";  // records 5-6 and 9-10

ProfileContext context_of(Communicator& comm) {
  ProfileContext c;
  c.backend = nullptr;
  c.activity = nullptr;
  c.comm = &comm;
  c.rank = 1;
  c.world = 2;
  c.device_name = "cpu";
  c.ops_run_on_host = true;
  return c;
}

ProfileOptions options_in(const test::TempDir& dir, const std::string& schedule) {
  ProfileOptions o;
  o.dir = dir.path().string();
  o.schedule = ProfileSchedule::parse(schedule);
  return o;
}

// Each step an op of a millisecond, named by its step.
void run_steps(Profiler& profiler, int64_t first, int64_t last) {
  for (int64_t s = first; s <= last; ++s) {
    profiler.before_step(s);
    {
      TraceScope op(TraceCategory::op, "work of step " + std::to_string(s));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    profiler.after_step(s);
  }
}

std::string in_dir(const test::TempDir& dir, const std::string& name) { return dir / name; }

struct ProfiledRun {
  std::vector<ProfiledWindow> windows;
  double rank0_ns = 0;
  std::vector<double> contributed;
  int barriers = 0;
};

ProfiledRun profile_twelve_steps(const test::TempDir& dir) {
  ProfiledRun run;
  run.rank0_ns = double(trace_clock_ns() + 5'000'000'000);
  ClockCommunicator comm(run.rank0_ns);
  Profiler profiler(options_in(dir, kSchedule), "cpu_test", 12, context_of(comm));
  run_steps(profiler, 1, 12);
  profiler.finish();
  run.windows = profiler.windows();
  run.contributed = comm.contributed;
  run.barriers = comm.barriers;
  return run;
}

TEST(Profiler, WritesATraceASummaryAndATimelinePerWindowOfTheSchedule) {
  test::TempDir dir;
  const ProfiledRun run = profile_twelve_steps(dir);
  EXPECT_FALSE(Tracer::get().is_open());
  ASSERT_EQ(run.windows.size(), 2u);
  EXPECT_EQ(run.windows[0].steps, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(run.windows[1].steps, (std::vector<int64_t>{9, 10}));
  EXPECT_EQ(run.windows[0].label, "cpu_test_steps5-6");
  EXPECT_EQ(run.windows[1].label, "cpu_test_steps9-10");
  for (const ProfiledWindow& w : run.windows) {
    EXPECT_EQ(w.files, (std::vector<std::string>{in_dir(dir, "trace_" + w.label + "_rank1.json.gz"),
                                                 in_dir(dir, "profile_" + w.label + "_rank1.txt"),
                                                 in_dir(dir, "timeline_" + w.label + "_rank1.svg")}));
    for (const std::string& file : w.files) {
      EXPECT_TRUE(fs::is_regular_file(file)) << file;
      EXPECT_GT(fs::file_size(file), 0u) << file;
    }
    ASSERT_EQ(w.summary.steps.size(), 2u);
    EXPECT_EQ(w.summary.steps[0].name, "ProfilerStep#" + std::to_string(w.steps[0]));
    EXPECT_EQ(w.summary.steps[1].name, "ProfilerStep#" + std::to_string(w.steps[1]));
  }
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 6u) << "three files a window, no temporaries";
  EXPECT_EQ(run.barriers, 2) << "one clock agreement a window";
  EXPECT_EQ(run.contributed, (std::vector<double>{0.0, 0.0})) << "rank 1 adds nothing to rank 0's reading";
  const std::string summary = file_bytes(in_dir(dir, "profile_cpu_test_steps5-6_rank1.txt"));
  EXPECT_EQ(lines_of(summary).at(0), "profile of cpu_test, rank 1 of 2, on cpu: 2 recorded step(s)") << summary;
  EXPECT_NE(summary.find("work of step 5"), std::string::npos) << summary;
}

TEST(Profiler, TraceHoldsTheRecordedStepsOnly_OnRankZerosClock) {
  test::TempDir dir;
  const ProfiledRun run = profile_twelve_steps(dir);
  ASSERT_EQ(run.windows.size(), 2u);
  const double rank0_us = run.rank0_ns / 1e3;
  for (size_t i = 0; i < 2; ++i) {
    const ProfiledWindow& w = run.windows[i];
    const json trace = json::parse(read_gzip_file(w.files[0]));
    EXPECT_EQ(trace.at("otherData").at("rank"), 1);
    std::multiset<std::string> step_names;
    std::vector<std::pair<double, double>> spans;
    for (const json& e : events_with(trace, "X")) {
      if (e.at("cat") != "step") continue;
      step_names.insert(e.at("name").get<std::string>());
      spans.push_back({e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>()});
    }
    const std::string a = std::to_string(w.steps[0]), b = std::to_string(w.steps[1]);
    EXPECT_EQ(step_names, (std::multiset<std::string>{"ProfilerStep#" + a, "ProfilerStep#" + b}));
    std::set<std::string> names;
    for (const json& e : events_with(trace, "X")) {
      const std::string name = e.at("name").get<std::string>();
      names.insert(name);
      const double ts = e.at("ts").get<double>(), end = ts + e.at("dur").get<double>();
      const bool inside = std::any_of(spans.begin(), spans.end(), [&](const std::pair<double, double>& span) {
        return ts >= span.first - 1e-3 && end <= span.second + 1e-3;
      });
      EXPECT_TRUE(inside) << name << " at " << ts << ".." << end << " lies in no recorded step";
      // This rank's clock plus (rank 0's reading - its own): just after rank 0's reading, not 5 s before it.
      EXPECT_GE(ts, rank0_us) << name;
      EXPECT_LT(ts, rank0_us + 60e6) << name;
    }
    EXPECT_EQ(names, (std::set<std::string>{"ProfilerStep#" + a, "ProfilerStep#" + b, "work of step " + a,
                                            "work of step " + b}))
        << "the warm-up step " << (w.steps[0] - 1) << " and the steps outside the window are not in it";
  }
}

TEST(Profiler, NeverOverwritesAnEarlierRunsFiles) {
  test::TempDir dir;
  const ProfiledRun first = profile_twelve_steps(dir);
  ASSERT_EQ(first.windows.size(), 2u);
  std::map<std::string, std::string> before;
  for (const ProfiledWindow& w : first.windows)
    for (const std::string& file : w.files) before[file] = file_bytes(file);
  ASSERT_EQ(before.size(), 6u);
  const ProfiledRun second = profile_twelve_steps(dir);
  ASSERT_EQ(second.windows.size(), 2u);
  EXPECT_EQ(second.windows[0].label, "cpu_test_steps5-6_2");
  EXPECT_EQ(second.windows[1].label, "cpu_test_steps9-10_2");
  EXPECT_EQ(second.windows[0].files[0], in_dir(dir, "trace_cpu_test_steps5-6_2_rank1.json.gz"));
  for (const ProfiledWindow& w : second.windows)
    for (const std::string& file : w.files) EXPECT_TRUE(fs::is_regular_file(file)) << file;
  for (const auto& [file, bytes] : before) EXPECT_EQ(file_bytes(file), bytes) << file << " was overwritten";
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 12u);
}

TEST(Profiler, FinishWritesTheWindowTheRunEndedInside) {
  test::TempDir dir;
  ClockCommunicator comm{double(trace_clock_ns())};
  Profiler profiler(options_in(dir, "skip_first=3,active=3,repeat=1"), "cpu_test", 5, context_of(comm));
  run_steps(profiler, 1, 5);
  EXPECT_TRUE(profiler.windows().empty()) << "the window (steps 4-6) has not ended";
  profiler.finish();
  EXPECT_FALSE(Tracer::get().is_open());
  ASSERT_EQ(profiler.windows().size(), 1u);
  const ProfiledWindow& w = profiler.windows()[0];
  EXPECT_EQ(w.steps, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(w.label, "cpu_test_steps4-5");
  ASSERT_EQ(w.summary.steps.size(), 2u);
  EXPECT_EQ(w.summary.steps[0].name, "ProfilerStep#4");
  EXPECT_EQ(w.summary.steps[1].name, "ProfilerStep#5");
  for (const std::string& file : w.files) EXPECT_TRUE(fs::is_regular_file(file)) << file;
}

TEST(Profiler, WithoutAScheduleRecordsTheLastThreeSteps) {
  test::TempDir dir;
  ClockCommunicator comm{double(trace_clock_ns())};
  ProfileOptions options;
  options.dir = dir.path().string();
  Profiler profiler(options, "cpu_test", 7, context_of(comm));
  run_steps(profiler, 1, 7);
  profiler.finish();
  ASSERT_EQ(profiler.windows().size(), 1u);
  EXPECT_EQ(profiler.windows()[0].steps, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(profiler.windows()[0].label, "cpu_test_steps5-7");
}

TEST(Profiler, AWindowLeftOpenByAFailingStepIsClosedNotWritten) {
  test::TempDir dir;
  ClockCommunicator comm{double(trace_clock_ns())};
  try {
    Profiler profiler(options_in(dir, kSchedule), "cpu_test", 12, context_of(comm));
    run_steps(profiler, 1, 4);
    profiler.before_step(5);
    TraceScope op(TraceCategory::op, "failing work");
    EXPECT_TRUE(Tracer::get().is_open());
    throw std::runtime_error("step 5 failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(Tracer::get().is_open());
  EXPECT_TRUE(fs::is_empty(dir.path())) << "nothing written";
}

// A device that ran one NCCL kernel for each host collective: the profiler gives the kernel its launch's bytes,
// so that the trace shows the collective's bus bandwidth on the communication stream; a group launch that ran two
// kernels gives them none (its bytes cannot be split between them).
class OneKernelPerCollective final : public DeviceActivity {
 public:
  void start() override {}
  void stop(std::vector<TraceSlice>& out) override {
    std::vector<TraceSlice> device;
    for (const TraceSlice& s : out) {
      if (s.lane.device || s.category != TraceCategory::collective) continue;
      const int kernels = s.name == "group" ? 2 : 1;
      for (int k = 0; k < kernels; ++k) {
        TraceSlice kernel;
        kernel.category = TraceCategory::collective;
        kernel.lane = {true, 7};
        kernel.name = "ncclDevKernel_AllGather_RING_LL";
        kernel.launched_by = s.id;
        kernel.start_ns = s.start_ns;
        kernel.end_ns = s.start_ns + 2'000'000;  // 2 ms
        device.push_back(kernel);
      }
    }
    out.insert(out.end(), device.begin(), device.end());
  }
  void name_stream(void*, const std::string&) override {}
  std::map<uint32_t, std::string> stream_names() const override { return {{7, "communication"}}; }
};

TEST(Profiler, DeviceCollectivesCarryTheirLaunchsBytesAndBusBandwidth) {
  test::TempDir dir;
  ClockCommunicator comm{double(trace_clock_ns())};
  OneKernelPerCollective device;
  ProfileContext context = context_of(comm);
  context.activity = &device;
  context.ops_run_on_host = false;
  Profiler profiler(options_in(dir, "active=1,repeat=1"), "gpu_test", 1, context);
  profiler.before_step(1);
  { TraceScope gather(TraceCategory::collective, "all_gather", 0, 8e6); }
  { TraceScope group(TraceCategory::collective, "group", 0, 4e6); }
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  profiler.after_step(1);
  ASSERT_EQ(profiler.windows().size(), 1u);
  const json trace = json::parse(read_gzip_file(in_dir(dir, "trace_gpu_test_steps1-1_rank1.json.gz")));
  std::vector<json> kernels;
  for (const json& e : events_with(trace, "X"))
    if (e.at("name") == "ncclDevKernel_AllGather_RING_LL") kernels.push_back(e);
  ASSERT_EQ(kernels.size(), 3u);
  int with_bytes = 0;
  for (const json& k : kernels) {
    if (!k.at("args").contains("bytes")) continue;
    ++with_bytes;
    EXPECT_EQ(k.at("args").at("bytes"), 8e6);
    // 8 MB in 2 ms is 4 GB/s; over 2 ranks an all-gather's bus factor is 1/2.
    EXPECT_NEAR(k.at("args").at("bus GB/s").get<double>(), 2.0, 1e-9);
  }
  EXPECT_EQ(with_bytes, 1) << "the all_gather's kernel only; the group's two share 4 MB in no known way";
}

TEST(Profiler, FileLabelKeepsLettersDigitsDashesAndDots) {
  EXPECT_EQ(profile_file_label("cpu_optimizer (stage 2), full ckpt"), "cpu_optimizer_stage_2_full_ckpt");
  EXPECT_EQ(profile_file_label("stage 3"), "stage_3");
  EXPECT_EQ(profile_file_label("cpu_optimizer:0.8 (stage-1)"), "cpu_optimizer_0.8_stage-1");
  EXPECT_EQ(profile_file_label("  (x)  "), "x");
  EXPECT_EQ(profile_file_label("()"), "run");
}

TEST(Profiler, RecordFieldsAreTheFirstWindowsMeanExposure) {
  EXPECT_FALSE(profile_record_fields({}).has_value());
  test::TempDir dir;
  const ProfiledRun run = profile_twelve_steps(dir);
  ASSERT_EQ(run.windows.size(), 2u);
  const std::optional<ProfileRecordFields> fields = profile_record_fields(run.windows);
  ASSERT_TRUE(fields.has_value());
  const ProfileSummary& first = run.windows[0].summary;
  EXPECT_EQ(fields->steps, "5-6");
  EXPECT_EQ(fields->exposed_ms, first.mean.exposed_ms);
  EXPECT_EQ(fields->bottleneck, exposed_category_name(first.bottleneck));
  // Each step's op (the CPU backend's compute) slept a millisecond.
  EXPECT_GE(fields->exposed_ms[size_t(ExposedCategory::compute)], 1.0);
  EXPECT_LE(fields->exposed_ms[size_t(ExposedCategory::compute)], first.mean.step_ms);
  double sum = 0;
  for (double ms : fields->exposed_ms) sum += ms;
  EXPECT_NEAR(sum, first.mean.step_ms, 1e-9);
  BenchRecord record;
  fill_profile(record, *fields);
  EXPECT_EQ(record.profile_steps, "5-6");
  EXPECT_EQ(record.exposed_compute_ms, fields->exposed_ms[size_t(ExposedCategory::compute)]);
  EXPECT_EQ(record.exposed_idle_ms, fields->exposed_ms[size_t(ExposedCategory::idle)]);
  EXPECT_EQ(record.profile_bottleneck, fields->bottleneck);
}

}  // namespace
}  // namespace zb
