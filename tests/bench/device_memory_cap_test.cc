// --device-memory-limit-gb's cap: the engine gets the card less what the device holds outside it, and a refusal
// says so.
#include "bench/device_memory_cap.h"

#include <gtest/gtest.h>

#include "core/errors.h"

namespace zb {
namespace {

// A device whose context and libraries hold `outside` bytes besides what the allocator hands out.
class HeldMemory final : public RawMemory {
 public:
  explicit HeldMemory(size_t outside) : outside_(outside) {}
  void* allocate(size_t bytes) override { return std::malloc(bytes); }
  void release(void* ptr) noexcept override { std::free(ptr); }
  Device device() const override { return Device::cuda(0); }
  const char* kind() const override { return "GPU"; }
  size_t held_outside(size_t) const override { return outside_; }

 private:
  size_t outside_;
};

TEST(DeviceMemoryCap, TheEngineGetsTheCardLessWhatIsHeldOutsideIt) {
  TrackingAllocator allocator(std::make_unique<HeldMemory>(300'000'000));
  const DeviceMemoryCap cap = cap_device_memory(allocator, 1'000'000'000);
  EXPECT_EQ(cap.held_outside, 300'000'000u);
  EXPECT_EQ(cap.engine_bytes(), 700'000'000u);
  EXPECT_EQ(allocator.limit(), std::optional<size_t>(700'000'000));
  Buffer fits = allocator.allocate(700'000'000 - 4096, MemoryPool::parameters);
  try {
    allocator.allocate(8192, MemoryPool::activations);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("--device-memory-limit-gb 1 less 0.30 GB held outside the engine"),
              std::string::npos)
        << e.what();
  }
}

TEST(DeviceMemoryCap, ACardSmallerThanWhatIsHeldOutsideLeavesNothing) {
  TrackingAllocator allocator(std::make_unique<HeldMemory>(2'000'000'000));
  const DeviceMemoryCap cap = cap_device_memory(allocator, 1'000'000'000);
  EXPECT_EQ(cap.engine_bytes(), 0u);
  EXPECT_THROW(allocator.allocate(1, MemoryPool::workspace), OutOfMemory);
}

TEST(DeviceMemoryCap, OnTheHostNothingIsHeldOutside) {
  TrackingAllocator allocator(std::make_unique<HostMemory>());
  const DeviceMemoryCap cap = cap_device_memory(allocator, 5000);
  EXPECT_EQ(cap.engine_bytes(), 5000u);
  EXPECT_EQ(cap.why(), "--device-memory-limit-gb 5e-06");
}

}  // namespace
}  // namespace zb
