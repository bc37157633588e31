#include "core/cuda_devices.h"

#include <cuda_runtime_api.h>

namespace zb {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    return 0;
  }
  return count;
}

std::string cuda_device_name(int ordinal) {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, ordinal) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return properties.name;
}

}  // namespace zb
