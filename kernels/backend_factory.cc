#include "kernels/backend_factory.h"

#include "core/cuda_memory.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace zb {

std::unique_ptr<RawMemory> make_device_memory(Device device) {
  if (device.is_cpu()) return std::make_unique<HostMemory>();
  return std::make_unique<DeviceMemory>(device.index);
}

std::unique_ptr<Backend> make_backend(Device device, TrackingAllocator& allocator) {
  if (device.is_cpu()) return std::make_unique<CpuBackend>();
  return make_cuda_backend(device.index, allocator);
}

}  // namespace zb
