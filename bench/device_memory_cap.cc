#include "bench/device_memory_cap.h"

#include <cstdio>

#include "core/strings.h"

namespace zb {

std::string DeviceMemoryCap::why() const {
  const std::string flag = cat("--device-memory-limit-gb ", double(card_bytes) / 1e9);
  if (held_outside == 0) return flag;
  char outside[32];
  std::snprintf(outside, sizeof outside, "%.2f", double(held_outside) / 1e9);
  return cat(flag, " less ", outside, " GB held outside the engine: CUDA context, libraries");
}

DeviceMemoryCap cap_device_memory(TrackingAllocator& allocator, size_t card_bytes) {
  DeviceMemoryCap cap{.card_bytes = card_bytes, .held_outside = allocator.held_outside()};
  allocator.set_limit(cap.engine_bytes(), cap.why());
  return cap;
}

}  // namespace zb
