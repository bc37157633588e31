#include "core/cuda_memory.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>

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
  constexpr size_t kPage = 4096;
  if (bytes > SIZE_MAX - kPage) return nullptr;
  const size_t rounded = bytes == 0 ? kPage : (bytes + kPage - 1) / kPage * kPage;
  void* ptr = std::aligned_alloc(kPage, rounded);
  if (ptr == nullptr) return nullptr;
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
