// Device and pinned host memory behind the TrackingAllocator. Both return nullptr on failure (after
// clearing CUDA's error state), so that the allocator turns the failure into OutOfMemory.
#pragma once

#include "core/tracking_allocator.h"

namespace zb {

class DeviceMemory final : public RawMemory {
 public:
  explicit DeviceMemory(int ordinal) : ordinal_(ordinal) {}
  void* allocate(size_t bytes) override;
  void release(void* ptr) noexcept override;
  Device device() const override { return Device::cuda(ordinal_); }
  const char* kind() const override { return "GPU"; }
  std::string availability(size_t allocated_here) const override;
  // cudaMalloc hands out whole 2 MiB pages for an allocation of 1 MiB or more (smaller ones share pages,
  // 512-byte aligned).
  size_t footprint(size_t bytes) const override;
  // The device's used memory (cudaMemGetInfo) less `allocated_here`.
  size_t held_outside(size_t allocated_here) const override;

 private:
  int ordinal_;
};

// Page-locked host memory: the GPU's copy engines reach it directly, at full PCIe bandwidth. Page-aligned
// (O_DIRECT transfers need 4 KiB alignment, and cudaHostAlloc gives small blocks less than that), so it is
// page-aligned host memory registered with CUDA.
class PinnedHostMemory final : public RawMemory {
 public:
  void* allocate(size_t bytes) override;
  void release(void* ptr) noexcept override;
  Device device() const override { return Device::cpu(); }
  const char* kind() const override { return "pinned host"; }
};

}  // namespace zb
