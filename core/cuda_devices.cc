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

size_t cuda_device_memory_bytes(int ordinal) {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, ordinal) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return properties.totalGlobalMem;
}

std::string cuda_device_pci_bus_id(int ordinal) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, int(sizeof id), ordinal) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return id;
}

namespace {
// CUDA encodes versions as 1000 * major + 10 * minor.
std::string version_text(int code) { return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 10); }
}  // namespace

std::string cuda_driver_version() {
  int code = 0;
  if (cudaDriverGetVersion(&code) != cudaSuccess || code == 0) {
    cudaGetLastError();
    return {};
  }
  return version_text(code);
}

std::string cuda_runtime_version() {
  int code = 0;
  if (cudaRuntimeGetVersion(&code) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return version_text(code);
}

}  // namespace zb
