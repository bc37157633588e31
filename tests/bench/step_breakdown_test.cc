// A recorded window split by the model's units: on a GPU a kernel's time goes to the pass whose slice holds its
// launching operation, the update's to the optimizer, the rest to "other"; groups of collectives are named by their
// kind and the communicator's copies are not collectives; on the CPU backend the operations are the compute.
#include "bench/step_breakdown.h"

#include <gtest/gtest.h>

namespace zb {
namespace {

constexpr int64_t kMs = 1'000'000;  // ns

TraceSlice slice(TraceCategory category, const std::string& name, int64_t start_ms, int64_t end_ms,
                 bool device = false) {
  TraceSlice s;
  s.category = category;
  s.name = name;
  s.start_ns = start_ms * kMs;
  s.end_ns = end_ms * kMs;
  s.lane = {device, device ? 7u : 1u};
  return s;
}

TraceSlice op(const std::string& name, int64_t start_ms, uint64_t id) {
  TraceSlice s = slice(TraceCategory::op, name, start_ms, start_ms + 1);
  s.id = id;
  return s;
}

TraceSlice kernel(uint64_t launched_by, int64_t start_ms, int64_t ms) {
  TraceSlice s = slice(TraceCategory::kernel, "k", start_ms, start_ms + ms, /*device=*/true);
  s.launched_by = launched_by;
  return s;
}

// Two steps of one block on a GPU: the second step's work is the first's shifted by 100 ms.
ProfileWindow gpu_window() {
  ProfileWindow w;
  w.ops_run_on_host = false;
  for (int64_t at : {int64_t(0), int64_t(100)}) {
    w.slices.push_back(slice(TraceCategory::step, "ProfilerStep#1", at, at + 100));
    w.slices.push_back(slice(TraceCategory::unit, "block.0 forward", at + 10, at + 40));
    w.slices.push_back(slice(TraceCategory::unit, "block.0 backward", at + 50, at + 80));
    const uint64_t id = uint64_t(at) + 1;
    w.slices.push_back(op("matmul_forward", at + 12, id));
    w.slices.push_back(op("matmul_backward", at + 55, id + 1));
    w.slices.push_back(op("optimizer_step", at + 85, id + 2));
    w.slices.push_back(kernel(id, at + 20, 20));
    w.slices.push_back(kernel(id + 1, at + 60, 10));
    w.slices.push_back(kernel(id + 2, at + 86, 3));
    w.slices.push_back(kernel(0, at + 95, 2));  // launched by no traced operation
    TraceSlice group = slice(TraceCategory::collective, "group", at + 60, at + 61);
    group.bytes = 100;
    group.detail = "all_reduce";
    w.slices.push_back(group);
    TraceSlice copy = slice(TraceCategory::collective, "copy", at + 62, at + 63);
    copy.bytes = 50;
    w.slices.push_back(copy);
    TraceSlice gather = slice(TraceCategory::collective, "all_gather", at + 5, at + 6);  // before any pass
    gather.bytes = 30;
    w.slices.push_back(gather);
  }
  return w;
}

TEST(StepBreakdown, GpuKernelsGoToTheirOperationsPass) {
  const StepBreakdown b = step_breakdown(gpu_window());
  EXPECT_EQ(b.steps, 2);
  EXPECT_DOUBLE_EQ(b.step_ms, 100);
  ASSERT_EQ(b.units.size(), 1u);
  EXPECT_EQ(b.units[0].unit, "block.0");
  EXPECT_DOUBLE_EQ(b.units[0].forward_ms, 20);
  EXPECT_DOUBLE_EQ(b.units[0].backward_ms, 10);
  EXPECT_DOUBLE_EQ(b.optimizer_ms, 3);
  EXPECT_DOUBLE_EQ(b.other_ms, 2);
  EXPECT_DOUBLE_EQ(b.accounted_ms(), 35);
  EXPECT_EQ(b.units[0].collective_bytes, (std::map<std::string, double>{{"all_reduce", 100}}));
  EXPECT_EQ(b.collective_bytes_outside_units, (std::map<std::string, double>{{"all_gather", 30}}));
}

TEST(StepBreakdown, OnTheCpuTheOperationsAreTheCompute) {
  ProfileWindow w;
  w.ops_run_on_host = true;
  w.slices.push_back(slice(TraceCategory::step, "ProfilerStep#1", 0, 100));
  w.slices.push_back(slice(TraceCategory::unit, "embeddings forward", 0, 10));
  w.slices.push_back(slice(TraceCategory::unit, "final backward", 40, 60));
  w.slices.push_back(slice(TraceCategory::op, "embedding_forward", 1, 9));
  w.slices.push_back(slice(TraceCategory::op, "matmul_backward", 41, 59));
  w.slices.push_back(slice(TraceCategory::op, "optimizer_step", 70, 90));
  w.slices.push_back(slice(TraceCategory::op, "global_norm", 60, 65));
  TraceSlice update = slice(TraceCategory::cpu_optimizer, "block.0 update", 20, 30);
  update.lane = {false, 2};
  w.slices.push_back(update);
  TraceSlice overlapping = slice(TraceCategory::cpu_optimizer, "block.0 update", 25, 35);
  overlapping.lane = {false, 3};
  w.slices.push_back(overlapping);
  const StepBreakdown b = step_breakdown(w);
  ASSERT_EQ(b.units.size(), 2u);
  EXPECT_EQ(b.units[0].unit, "embeddings");
  EXPECT_DOUBLE_EQ(b.units[0].forward_ms, 8);
  EXPECT_EQ(b.units[1].unit, "final") << "a unit seen only in a backward comes after the others";
  EXPECT_DOUBLE_EQ(b.units[1].backward_ms, 18);
  EXPECT_DOUBLE_EQ(b.optimizer_ms, 20);
  EXPECT_DOUBLE_EQ(b.other_ms, 5);
  EXPECT_DOUBLE_EQ(b.cpu_optimizer_ms, 15) << "the host update's threads count as their union";
}

TEST(StepBreakdown, AWindowWithoutStepsIsEmpty) {
  ProfileWindow w;
  w.slices.push_back(slice(TraceCategory::unit, "block.0 forward", 0, 10));
  const StepBreakdown b = step_breakdown(w);
  EXPECT_EQ(b.steps, 0);
  EXPECT_TRUE(b.units.empty());
}

}  // namespace
}  // namespace zb
