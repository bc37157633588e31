#include "kernels/backend_factory.h"

#include "core/cuda_memory.h"
#include "core/errors.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef ZB_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace zb {

std::unique_ptr<RawMemory> make_device_memory(Device device) {
  if (device.is_cpu()) return std::make_unique<HostMemory>();
  return std::make_unique<DeviceMemory>(device.index);
}

std::unique_ptr<Backend> make_backend(Device device, TrackingAllocator& allocator, const BackendOptions& options) {
  if (device.is_cpu()) return std::make_unique<CpuBackend>();
#ifdef ZB_WITH_CUDA
  return make_cuda_backend(device.index, allocator, options);
#else
  (void)allocator;
  (void)options;
  throw Error("this build has no CUDA support (the toolkit was not found): use --device cpu");
#endif
}

}  // namespace zb
