// --device-memory-limit-gb X, in every program: run as if the device were a card of X GB (1e9 bytes), so that a
// user with a large card can ask what fits on a smaller one, and the CPU backend (whose "device" is the host) can
// run out of memory on purpose in tests.
//
// How a smaller card is counted: its X GB hold, besides the engine's tensors, what the process keeps on the device
// outside them: the CUDA context, the libraries' handles and buffers (cuBLAS, cuDNN, NCCL's communicators) and
// anything another program holds. That is measured on this device when a configuration starts (cudaMemGetInfo's
// used memory less what the engine's allocator holds), and the engine's allocations are capped at X less it. The
// same driver and libraries hold about the same on a smaller card of the same architecture. Each allocation counts
// as the driver rounds it (whole 2 MiB pages from 1 MiB up), not as asked. What a library allocates later, during
// the steps (NCCL's lazily made buffers), is not foreseen: the record's device_memory_outside_gb says what was
// measured, and the GPU's own out-of-memory error still applies beneath the cap.
#pragma once

#include <cstddef>
#include <string>

#include "core/tracking_allocator.h"

namespace zb {

struct DeviceMemoryCap {
  size_t card_bytes = 0;    // X GB
  size_t held_outside = 0;  // measured when the cap was set
  size_t engine_bytes() const { return card_bytes > held_outside ? card_bytes - held_outside : 0; }
  // "--device-memory-limit-gb 24 less 0.62 GB held outside the engine (CUDA context, libraries)": the end of the
  // message of an allocation the cap refuses.
  std::string why() const;
};

// Measures what the device holds outside `allocator` now, and caps the allocator at card_bytes less that.
DeviceMemoryCap cap_device_memory(TrackingAllocator& allocator, size_t card_bytes);

// The flag's help, shared by every program.
inline constexpr const char* kDeviceMemoryLimitHelp =
    "run as if the device (each rank's GPU; on --device cpu the host memory the engine's tensors take) had this "
    "many GB (1e9 bytes): the engine's allocations are capped at it less what the device holds outside them when "
    "a configuration starts (the CUDA context, cuBLAS/cuDNN/NCCL buffers), each counted as the driver rounds it. "
    "A configuration that does not fit is recorded oom with the pool that asked and the bytes";

}  // namespace zb
