#include "core/tracking_allocator.h"

#include <algorithm>
#include <cstdlib>

#include "core/strings.h"

namespace zb {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}

void* HostMemory::allocate(size_t bytes) {
  if (bytes > SIZE_MAX - alignment_) return nullptr;  // rounding up would wrap around
  size_t rounded = (bytes + alignment_ - 1) / alignment_ * alignment_;
  return std::aligned_alloc(alignment_, rounded == 0 ? alignment_ : rounded);
}

void HostMemory::release(void* ptr) noexcept { std::free(ptr); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = other.owner_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    pool_ = other.pool_;
    other.owner_ = nullptr;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

Device Buffer::device() const { return owner_ ? owner_->device() : Device::cpu(); }

Tensor Buffer::view(Shape shape, DType dtype) const {
  ZB_CHECK(shape.numel() * dtype_size(dtype) <= bytes_, "view ", shape.to_string(), " ", dtype_name(dtype),
           " does not fit a buffer of ", bytes_, " bytes");
  return Tensor(data_, shape, dtype, device());
}

void Buffer::reset() noexcept {
  if (owner_ && data_) owner_->release(data_, bytes_, pool_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

TrackingAllocator::TrackingAllocator(std::unique_ptr<RawMemory> memory, std::optional<size_t> limit_bytes)
    : memory_(std::move(memory)), limit_(limit_bytes) {}

Buffer TrackingAllocator::allocate(size_t bytes, MemoryPool pool) {
  std::lock_guard lock(mutex_);
  const size_t footprint = bytes ? memory_->footprint(bytes) : 0;
  if (limit_ && footprint_ + footprint > *limit_) {
    throw OutOfMemory(cat("out of ", memory_->kind(), " memory: ", memory_pool_name(pool), " asked for ", bytes,
                          " bytes (", double(bytes) / kGiB, " GiB) with ", double(total_.current) / kGiB,
                          " GiB in use; the cap is ", double(*limit_) / 1e9, " GB",
                          limit_why_.empty() ? "" : " (", limit_why_, limit_why_.empty() ? "" : ")"),
                      std::string(memory_pool_name(pool)), bytes);
  }
  void* data = bytes ? memory_->allocate(bytes) : nullptr;
  if (bytes && !data) {
    const std::string available = memory_->availability(total_.current);
    throw OutOfMemory(cat("out of ", memory_->kind(), " memory on ", memory_->device().to_string(), ": ",
                          memory_pool_name(pool), " asked for ", bytes, " bytes (", double(bytes) / kGiB,
                          " GiB) with ", double(total_.current) / kGiB, " GiB in use",
                          available.empty() ? "" : "; ", available),
                      std::string(memory_pool_name(pool)), bytes);
  }
  auto& p = pools_[static_cast<int>(pool)];
  p.current += bytes;
  p.peak = std::max(p.peak, p.current);
  total_.current += bytes;
  total_.peak = std::max(total_.peak, total_.current);
  footprint_ += footprint;
  return Buffer(this, data, bytes, pool);
}

void TrackingAllocator::release(void* data, size_t bytes, MemoryPool pool) noexcept {
  memory_->release(data);
  std::lock_guard lock(mutex_);
  pools_[static_cast<int>(pool)].current -= bytes;
  total_.current -= bytes;
  footprint_ -= bytes ? memory_->footprint(bytes) : 0;
}

PoolUsage TrackingAllocator::usage(MemoryPool pool) const {
  std::lock_guard lock(mutex_);
  return pools_[static_cast<int>(pool)];
}

PoolUsage TrackingAllocator::total() const {
  std::lock_guard lock(mutex_);
  return total_;
}

void TrackingAllocator::reset_peaks() {
  std::lock_guard lock(mutex_);
  for (auto& p : pools_) p.peak = p.current;
  total_.peak = total_.current;
}

void TrackingAllocator::set_limit(std::optional<size_t> limit_bytes, std::string why) {
  std::lock_guard lock(mutex_);
  limit_ = limit_bytes;
  limit_why_ = std::move(why);
}

std::optional<size_t> TrackingAllocator::limit() const {
  std::lock_guard lock(mutex_);
  return limit_;
}

size_t TrackingAllocator::held_outside() const {
  std::lock_guard lock(mutex_);
  return memory_->held_outside(footprint_);
}

}  // namespace zb
