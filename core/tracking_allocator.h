// TrackingAllocator: every byte the engine allocates goes through one of these, so that current and
// peak use per pool are known exactly. A failed allocation (the memory itself, or the configured limit)
// throws OutOfMemory and leaves the allocator consistent: whatever was already allocated can still be
// released and the process can go on.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/device.h"
#include "core/memory_pool.h"
#include "core/tensor.h"

namespace zb {

// The memory behind an allocator: host, pinned host or device. allocate returns nullptr on failure.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr) noexcept = 0;
  virtual Device device() const = 0;
  virtual const char* kind() const = 0;  // "host", "pinned host", "device": for error messages
  // What the memory as a whole has left, for an out-of-memory message (empty where nothing useful is known):
  // a GPU's free and total bytes say whether something outside the allocator (another program, the CUDA
  // context, library workspaces) holds what was missing.
  virtual std::string availability(size_t allocated_here) const {
    (void)allocated_here;
    return {};
  }
  // What an allocation of `bytes` takes of the memory, its rounding included (a GPU's allocations are rounded to
  // its pages): what a cap on the memory (TrackingAllocator::set_limit) counts.
  virtual size_t footprint(size_t bytes) const { return bytes; }
  // Bytes of the memory in use that this allocator did not hand out (`allocated_here` being what it holds now):
  // on a GPU, the CUDA context, the libraries' handles and buffers (cuBLAS, cuDNN, NCCL) and other programs.
  virtual size_t held_outside(size_t allocated_here) const {
    (void)allocated_here;
    return 0;
  }
};

// Ordinary host memory, aligned (64 bytes for vector loads; 4096 for O_DIRECT buffers).
class HostMemory final : public RawMemory {
 public:
  explicit HostMemory(size_t alignment = 64) : alignment_(alignment) {}
  void* allocate(size_t bytes) override;
  void release(void* ptr) noexcept override;
  Device device() const override { return Device::cpu(); }
  const char* kind() const override { return "host"; }

 private:
  size_t alignment_;
};

// Addresses that are never dereferenced (each block a little apart from the last): what a plan of
// allocations would take can be counted by a TrackingAllocator over it without taking any memory.
class CountingMemory final : public RawMemory {
 public:
  explicit CountingMemory(Device device = Device::cpu()) : device_(device) {}
  void* allocate(size_t bytes) override {
    next_ += (bytes + 255) / 256 * 256 + 256;
    return reinterpret_cast<void*>(next_);
  }
  void release(void*) noexcept override {}
  Device device() const override { return device_; }
  const char* kind() const override { return "counting"; }

 private:
  Device device_;
  uintptr_t next_ = uintptr_t(1) << 20;
};

struct PoolUsage {
  size_t current = 0;
  size_t peak = 0;
};

class TrackingAllocator;

// Owns one allocation; returns it to its allocator when destroyed. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }
  Device device() const;
  // A view of the first shape.numel() elements of this buffer.
  Tensor view(Shape shape, DType dtype) const;
  void reset() noexcept;

 private:
  friend class TrackingAllocator;
  Buffer(TrackingAllocator* owner, void* data, size_t bytes, MemoryPool pool)
      : owner_(owner), data_(data), bytes_(bytes), pool_(pool) {}

  TrackingAllocator* owner_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemoryPool pool_ = MemoryPool::workspace;
};

class TrackingAllocator {
 public:
  explicit TrackingAllocator(std::unique_ptr<RawMemory> memory, std::optional<size_t> limit_bytes = {});
  TrackingAllocator(const TrackingAllocator&) = delete;
  TrackingAllocator& operator=(const TrackingAllocator&) = delete;

  // Throws OutOfMemory when the memory is exhausted or the allocation would pass the limit.
  Buffer allocate(size_t bytes, MemoryPool pool);
  // Allocates room for shape x dtype and returns the Buffer; view it with buffer.view(shape, dtype).
  Buffer allocate(Shape shape, DType dtype, MemoryPool pool) { return allocate(shape.numel() * dtype_size(dtype), pool); }

  Device device() const { return memory_->device(); }
  PoolUsage usage(MemoryPool pool) const;
  PoolUsage total() const;
  void reset_peaks();
  // Caps the total footprint (RawMemory::footprint) of what this allocator hands out (nullopt: no cap beyond the
  // memory itself). `why` ends the message of an allocation the cap refuses ("--device-memory-limit-gb 24 less
  // 0.6 GB held outside the engine").
  void set_limit(std::optional<size_t> limit_bytes, std::string why = {});
  std::optional<size_t> limit() const;
  // Bytes of the memory in use outside this allocator now (RawMemory::held_outside).
  size_t held_outside() const;

 private:
  friend class Buffer;
  void release(void* data, size_t bytes, MemoryPool pool) noexcept;

  std::unique_ptr<RawMemory> memory_;
  std::optional<size_t> limit_;
  std::string limit_why_;
  size_t footprint_ = 0;  // of the allocations alive, rounded as the memory rounds them
  mutable std::mutex mutex_;
  std::array<PoolUsage, kMemoryPoolCount> pools_{};
  PoolUsage total_{};
};

}  // namespace zb
