// Status checks for CUDA runtime and cuBLAS(Lt) calls: on failure they throw with the call's text and the
// source location. An allocation failure becomes OutOfMemory, so that callers can recover from it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so the process can go on
  const std::string message = cat(file, ":", line, ": ", call, " failed: ", cudaGetErrorString(status));
  if (status == cudaErrorMemoryAllocation) throw OutOfMemory(message);
  throw Error(message);
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(cat(file, ":", line, ": ", call, " failed: cuBLAS status ", int(status)));
}

}  // namespace zb

#define ZB_CUDA_CHECK(call)                                                    \
  do {                                                                         \
    const cudaError_t zb_status_ = (call);                                     \
    if (zb_status_ != cudaSuccess) ::zb::throw_cuda_error(zb_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports a bad launch configuration at once, with the kernel's location.
#define ZB_CUDA_CHECK_LAUNCH() ZB_CUDA_CHECK(cudaGetLastError())

#define ZB_CUBLAS_CHECK(call)                                                  \
  do {                                                                         \
    const cublasStatus_t zb_status_ = (call);                                  \
    if (zb_status_ != CUBLAS_STATUS_SUCCESS) ::zb::throw_cublas_error(zb_status_, #call, __FILE__, __LINE__); \
  } while (0)
