#include "core/cuda_memory.h"

#include <cuda_runtime_api.h>

namespace zb {

void* DeviceMemory::allocate(size_t bytes) {
  int current = -1;
  cudaGetDevice(&current);
  if (current != ordinal_) cudaSetDevice(ordinal_);
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return ptr;
}

void DeviceMemory::release(void* ptr) noexcept { cudaFree(ptr); }

void* PinnedHostMemory::allocate(size_t bytes) {
  void* ptr = nullptr;
  if (cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return ptr;
}

void PinnedHostMemory::release(void* ptr) noexcept { cudaFreeHost(ptr); }

}  // namespace zb
