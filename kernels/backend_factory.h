// Chooses the backend and the memory for a device: the CPU reference, or the CUDA backend on GPU N.
#pragma once

#include <memory>

#include "core/tracking_allocator.h"
#include "kernels/backend.h"
#include "kernels/backend_options.h"

namespace zb {

// The memory the engine allocates from on `device` (host memory for the CPU, device memory for a GPU).
std::unique_ptr<RawMemory> make_device_memory(Device device);
// The backend for `device`; its scratch comes from `allocator`, which must serve the same device. The CPU
// backend has one implementation of each op and takes no options.
std::unique_ptr<Backend> make_backend(Device device, TrackingAllocator& allocator, const BackendOptions& options);

}  // namespace zb
