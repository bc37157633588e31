// Helpers shared by the CUDA kernels: element conversions, 16-byte vector access, warp reductions and
// launch arithmetic. Kernels compute in fp32 whatever the storage type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "core/check.h"
#include "core/cuda_check.h"

namespace zb::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(f16 x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16(x); }
// Rounds to nearest even; beyond fp16's largest finite value (65504) gives infinity, which the loss scale's
// overflow check then sees.
template <>
__device__ __forceinline__ f16 from_float<f16>(float x) { return __float2half_rn(x); }

// Two 16-bit elements in one register, for the paired instructions (__hmax2, __low2float, ...).
template <typename T>
struct Pair;
template <>
struct Pair<bf16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ type of(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
};
template <>
struct Pair<f16> {
  using type = __half2;
  static __device__ __forceinline__ type of(float lo, float hi) { return __floats2half2_rn(lo, hi); }
};

// kVec elements of T in 16 bytes, loaded and stored in one instruction.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

template <typename T>
__device__ __forceinline__ Vec16<T> load16(const T* p) { return *reinterpret_cast<const Vec16<T>*>(p); }
template <typename T>
__device__ __forceinline__ void store16(T* p, const Vec16<T>& v) { *reinterpret_cast<Vec16<T>*>(p) = v; }

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Blocks to cover `work` items at `per_block` each; refuses more than a grid's x extent can hold.
inline unsigned blocks_for(int64_t work, int per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  ZB_CHECK(blocks <= 0x7fffffff, "a launch of ", blocks, " blocks exceeds the grid limit");
  return unsigned(blocks);
}

// What launches ask of the current GPU, read once per device rather than queried by the driver at every
// launch (host time only: no step measured faster for it, the host being ahead of the GPU).
struct DeviceLimits {
  size_t shared_per_block = 0;  // the most dynamic shared memory a block may opt in to (227 KB on an H100/H200)
  int multiprocessors = 0;
};

inline const DeviceLimits& current_device_limits() {
  constexpr int kMaxDevices = 64;
  static DeviceLimits limits[kMaxDevices];
  static std::once_flag read[kMaxDevices];
  int device = 0;
  ZB_CUDA_CHECK(cudaGetDevice(&device));
  ZB_CHECK(device >= 0 && device < kMaxDevices, "CUDA device ", device, " beyond the ", kMaxDevices, " supported");
  std::call_once(read[device], [&] {
    int bytes = 0, sms = 0;
    ZB_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    ZB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    limits[device] = {size_t(bytes), sms};
  });
  return limits[device];
}

inline size_t max_shared_memory_per_block() { return current_device_limits().shared_per_block; }

// A value kept per kernel and device, for launch settings asked of (or given to) the driver once rather than at
// every launch. with(kernel, fn) runs fn on the current device's value, value-initialised on first use, under
// a lock.
template <typename Value>
class PerKernelAndDevice {
 public:
  template <typename Fn>
  auto with(const void* kernel, Fn fn) {
    int device = 0;
    ZB_CUDA_CHECK(cudaGetDevice(&device));
    const std::lock_guard<std::mutex> lock(mutex_);
    return fn(values_[{kernel, device}]);
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<const void*, int>, Value> values_;
};

// Lets `kernel` launch with `bytes` of dynamic shared memory on the current device, setting the attribute only
// when it grows (once per kernel and device in practice).
template <typename Kernel>
void allow_dynamic_shared_memory(Kernel* kernel, size_t bytes) {
  static PerKernelAndDevice<size_t> allowed;
  allowed.with(reinterpret_cast<const void*>(kernel), [&](size_t& current) {
    if (bytes <= current) return;
    ZB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    current = bytes;
  });
}

// The registers a thread of `kernel` holds, as compiled for the current device (asked once per kernel and device).
template <typename Kernel>
int registers_per_thread(Kernel* kernel) {
  static PerKernelAndDevice<int> registers;  // 0: not asked yet
  return registers.with(reinterpret_cast<const void*>(kernel), [&](int& known) {
    if (known == 0) {
      cudaFuncAttributes attributes{};
      ZB_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
      known = attributes.numRegs;
    }
    return known;
  });
}

// True when every pointer is 16-byte aligned and n is a whole number of 16-byte vectors of T.
template <typename T, typename... Ptrs>
bool vectorizable(int64_t n, const Ptrs*... ptrs) {
  return n % Vec16<T>::kSize == 0 && ((reinterpret_cast<uintptr_t>(ptrs) % 16 == 0) && ...);
}

}  // namespace zb::cuda
