#include "core/cuda_memory.h"

#include <cuda_runtime_api.h>

#include <cstdlib>

#include "core/host_pages.h"

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
  void* ptr = allocate_host_pages(bytes, HostPages::huge_where_large);
  if (ptr == nullptr) return nullptr;
  const size_t rounded = host_block_bytes(bytes, HostPages::huge_where_large);
  if (cudaHostRegister(ptr, rounded, cudaHostRegisterDefault) != cudaSuccess) {
    cudaGetLastError();
    std::free(ptr);
    return nullptr;
  }
  return ptr;
}

void PinnedHostMemory::release(void* ptr) noexcept {
  if (ptr == nullptr) return;
  cudaHostUnregister(ptr);
  std::free(ptr);
}

}  // namespace zb
