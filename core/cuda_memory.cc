#include "core/cuda_memory.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "core/strings.h"

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

std::string DeviceMemory::availability(size_t allocated_here) const {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  constexpr double kGiB = double(1ull << 30);
  const double elsewhere = double(total_bytes) - double(free_bytes) - double(allocated_here);
  return cat("the GPU has ", double(free_bytes) / kGiB, " of ", double(total_bytes) / kGiB, " GiB free; ",
             std::max(elsewhere, 0.0) / kGiB,
             " GiB are held outside this run's tensors (the CUDA context, library workspaces, other programs)");
}

size_t DeviceMemory::footprint(size_t bytes) const {
  constexpr size_t kPage = size_t(2) << 20, kSmall = size_t(1) << 20, kAlignment = 512;
  const size_t unit = bytes >= kSmall ? kPage : kAlignment;
  return (bytes + unit - 1) / unit * unit;
}

size_t DeviceMemory::held_outside(size_t allocated_here) const {
  int current = -1;
  cudaGetDevice(&current);
  if (current != ordinal_) cudaSetDevice(ordinal_);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  const size_t used = total_bytes - free_bytes;
  return used > allocated_here ? used - allocated_here : 0;
}

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
