// core/: shapes and views, the tracking allocator's accounting and its out-of-memory behaviour, parsing,
// and the counter-based random numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "core/device.h"
#include "core/random.h"
#include "core/strings.h"
#include "core/tensor.h"
#include "core/tracking_allocator.h"

namespace zb {
namespace {

TEST(Tensor, ViewsAndSlices) {
  std::vector<float> data(24);
  Tensor t(data.data(), Shape{2, 3, 4}, DType::f32, Device::cpu());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.bytes(), 96u);
  EXPECT_EQ(t.reshaped(Shape{6, 4}).dim(0), 6);
  EXPECT_THROW(t.reshaped(Shape{5, 5}), Error);
  EXPECT_EQ(t.flat_slice(4, 10).as<float>(), data.data() + 4);
  EXPECT_THROW(t.flat_slice(10, 30), Error);
  EXPECT_THROW(t.as<double>(), Error) << "as<T> checks the dtype";
}

TEST(TrackingAllocator, CountsCurrentAndPeakPerPool) {
  TrackingAllocator allocator(std::make_unique<HostMemory>());
  {
    Buffer a = allocator.allocate(1000, MemoryPool::parameters);
    Buffer b = allocator.allocate(500, MemoryPool::activations);
    { Buffer c = allocator.allocate(300, MemoryPool::activations); }
    EXPECT_EQ(allocator.usage(MemoryPool::parameters).current, 1000u);
    EXPECT_EQ(allocator.usage(MemoryPool::activations).current, 500u);
    EXPECT_EQ(allocator.usage(MemoryPool::activations).peak, 800u);
    EXPECT_EQ(allocator.total().peak, 1800u);
    Buffer moved = std::move(a);
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(allocator.total().current, 1500u);
  }
  EXPECT_EQ(allocator.total().current, 0u);
  EXPECT_EQ(allocator.total().peak, 1800u);
  allocator.reset_peaks();
  EXPECT_EQ(allocator.total().peak, 0u);
}

TEST(TrackingAllocator, LimitThrowsOutOfMemoryAndStaysUsable) {
  TrackingAllocator allocator(std::make_unique<HostMemory>(), 4096);
  Buffer a = allocator.allocate(3000, MemoryPool::gradients);
  EXPECT_THROW(allocator.allocate(2000, MemoryPool::gradients), OutOfMemory);
  EXPECT_EQ(allocator.total().current, 3000u) << "a failed allocation leaves no trace";
  a.reset();
  Buffer b = allocator.allocate(4000, MemoryPool::gradients);
  EXPECT_FALSE(b.empty());
}

// A memory that runs out after `capacity` bytes and says what it has left, as a GPU does.
class SmallMemory final : public RawMemory {
 public:
  explicit SmallMemory(size_t capacity) : capacity_(capacity) {}
  void* allocate(size_t bytes) override {
    if (used_ + bytes > capacity_) return nullptr;
    used_ += bytes;
    return std::malloc(bytes);
  }
  void release(void* ptr) noexcept override { std::free(ptr); }
  Device device() const override { return Device::cuda(0); }
  const char* kind() const override { return "GPU"; }
  std::string availability(size_t allocated_here) const override {
    return cat(capacity_ - used_, " bytes free, ", used_ - allocated_here, " held elsewhere");
  }
  size_t used_ = 0;

 private:
  size_t capacity_;
};

TEST(TrackingAllocator, OutOfMemorySaysWhatTheMemoryHasLeft) {
  auto memory = std::make_unique<SmallMemory>(5000);
  memory->used_ = 1000;  // taken by someone else before this allocator
  TrackingAllocator allocator(std::move(memory));
  Buffer a = allocator.allocate(3000, MemoryPool::parameters);
  try {
    allocator.allocate(2000, MemoryPool::gradients);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("gradients asked for 2000 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("; 1000 bytes free, 1000 held elsewhere"), std::string::npos) << e.what();
    EXPECT_EQ(e.pool(), "gradients");
    EXPECT_EQ(e.bytes(), 2000u);
  }
}

// A memory that rounds every allocation up to 1 KiB and holds 700 bytes of its own, as a GPU rounds to its
// pages and holds its context.
class PagedMemory final : public RawMemory {
 public:
  void* allocate(size_t bytes) override { return std::malloc(bytes); }
  void release(void* ptr) noexcept override { std::free(ptr); }
  Device device() const override { return Device::cuda(0); }
  const char* kind() const override { return "GPU"; }
  size_t footprint(size_t bytes) const override { return (bytes + 1023) / 1024 * 1024; }
  size_t held_outside(size_t) const override { return 700; }
};

TEST(TrackingAllocator, TheLimitCountsAllocationsAsTheMemoryRoundsThem) {
  TrackingAllocator allocator(std::make_unique<PagedMemory>());
  allocator.set_limit(3 * 1024, "a card of 3 KiB");
  Buffer a = allocator.allocate(1000, MemoryPool::parameters);   // 1 KiB
  Buffer b = allocator.allocate(1025, MemoryPool::activations);  // 2 KiB
  EXPECT_EQ(allocator.total().current, 2025u) << "pools count what was asked";
  try {
    allocator.allocate(1, MemoryPool::workspace);  // 3 KiB taken: even a byte takes a page
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.pool(), "workspace");
    EXPECT_EQ(e.bytes(), 1u);
    EXPECT_NE(std::string(e.what()).find("(a card of 3 KiB)"), std::string::npos) << e.what();
  }
  b.reset();  // its page is given back
  Buffer c = allocator.allocate(2048, MemoryPool::activations);
  EXPECT_FALSE(c.empty());
  EXPECT_EQ(allocator.held_outside(), 700u);
  EXPECT_EQ(allocator.limit(), std::optional<size_t>(3 * 1024));
}

TEST(Parsing, DevicesAndDtypes) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_THROW(parse_device("cuda:x"), UsageError);
  EXPECT_THROW(parse_device("tpu"), UsageError);
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_THROW(parse_dtype("int8"), UsageError);
}

TEST(Random, Philox4x32MatchesTheKnownAnswers) {
  // Random123's published test vectors for philox4x32-10.
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}), (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Random, CounterBasedAndWellDistributed) {
  EXPECT_EQ(random_normal(1, 2, 3), random_normal(1, 2, 3));
  EXPECT_NE(random_normal(1, 2, 3), random_normal(1, 2, 4));
  EXPECT_NE(random_normal(1, 2, 3), random_normal(2, 2, 3));
  EXPECT_NE(random_normal(1, 2, 3), random_normal(1, 3, 3));
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  std::vector<int> counts(10);
  for (int i = 0; i < n; ++i) {
    const double x = random_normal(7, 0, i);
    sum += x;
    sum_sq += x * x;
    ++counts[random_below(7, 1, i, 10)];
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.01);
  for (int c : counts) EXPECT_NEAR(c, n / 10, n / 100);
}

}  // namespace
}  // namespace zb
