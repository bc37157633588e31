// The tracer records the scopes that close while it is open, on the lane of the thread that ran them, and
// nothing while closed; launching scopes (ops, collectives) get distinct ids and call the device's hooks.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "core/trace.h"

namespace zb {
namespace {

std::vector<uint64_t> pushed;
int popped = 0;

const TraceSlice& named(const std::vector<TraceSlice>& slices, const std::string& name) {
  const auto it = std::find_if(slices.begin(), slices.end(), [&](const TraceSlice& s) { return s.name == name; });
  EXPECT_NE(it, slices.end()) << name;
  return *it;
}

TEST(Tracer, RecordsScopesWhileOpenOnTheirThreadsLanes) {
  Tracer& tracer = Tracer::get();
  { TraceScope before(TraceCategory::op, "before"); }
  tracer.open();
  tracer.name_this_thread("main");
  {
    TraceScope step(TraceCategory::step, "ProfilerStep#3");
    {
      TraceScope op(TraceCategory::op, "matmul_forward", 2e9, 3e6);
      op.set_detail("m 1024");
    }
    std::thread worker([&] {
      tracer.name_this_thread("cpu optimizer 0");
      TraceScope update(TraceCategory::cpu_optimizer, "block.0");
    });
    worker.join();
  }
  const std::vector<TraceSlice> slices = tracer.close();
  { TraceScope after(TraceCategory::op, "after"); }
  EXPECT_TRUE(tracer.close().empty()) << "closed: nothing recorded";
  ASSERT_EQ(slices.size(), 3u);
  const TraceSlice &step = named(slices, "ProfilerStep#3"), &op = named(slices, "matmul_forward"),
                   &update = named(slices, "block.0");
  EXPECT_EQ(step.category, TraceCategory::step);
  EXPECT_EQ(op.lane, step.lane);
  EXPECT_FALSE(op.lane.device);
  EXPECT_NE(update.lane, step.lane);
  EXPECT_LE(step.start_ns, op.start_ns);
  EXPECT_LE(op.start_ns, op.end_ns);
  EXPECT_LE(op.end_ns, step.end_ns);
  EXPECT_LE(step.start_ns, update.start_ns);
  EXPECT_LE(update.end_ns, step.end_ns);
  EXPECT_EQ(op.flops, 2e9);
  EXPECT_EQ(op.bytes, 3e6);
  EXPECT_EQ(op.detail, "m 1024");
  EXPECT_NE(op.id, 0u) << "an op launches device work: it has an id";
  EXPECT_EQ(step.id, 0u);
  const auto names = tracer.thread_names();
  EXPECT_EQ(names.at(step.lane.id), "main");
  EXPECT_EQ(names.at(update.lane.id), "cpu optimizer 0");
}

TEST(Tracer, LaunchingScopesCallTheDevicesHooksWithTheirIds) {
  Tracer& tracer = Tracer::get();
  pushed.clear();
  popped = 0;
  tracer.set_launch_hooks([](uint64_t id) { pushed.push_back(id); }, [] { ++popped; });
  tracer.open();
  {
    TraceScope unit(TraceCategory::unit, "block.1 forward");
    TraceScope a(TraceCategory::op, "a");
    TraceScope b(TraceCategory::collective, "all_gather");
  }
  const std::vector<TraceSlice> slices = tracer.close();
  tracer.set_launch_hooks(nullptr, nullptr);
  ASSERT_EQ(pushed.size(), 2u) << "ops and collectives only";
  EXPECT_EQ(popped, 2);
  EXPECT_EQ(pushed[0], named(slices, "a").id);
  EXPECT_EQ(pushed[1], named(slices, "all_gather").id);
  EXPECT_NE(pushed[0], pushed[1]);
}

TEST(Tracer, ClockIsMonotonicNanoseconds) {
  const int64_t a = trace_clock_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const int64_t b = trace_clock_ns();
  EXPECT_GE(b - a, 2'000'000);
  EXPECT_LT(b - a, 2'000'000'000);
}

}  // namespace
}  // namespace zb
