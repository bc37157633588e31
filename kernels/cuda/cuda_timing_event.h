// The CUDA backend's TimingEvent: an event with timing, recorded on a stream when made.
#pragma once

#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#include "kernels/backend.h"

namespace zb::cuda {

struct CudaTimingEvent final : TimingEvent {
  cudaEvent_t event = nullptr;
  explicit CudaTimingEvent(cudaStream_t stream) {
    ZB_CUDA_CHECK(cudaEventCreate(&event));
    ZB_CUDA_CHECK(cudaEventRecord(event, stream));
  }
  ~CudaTimingEvent() override { cudaEventDestroy(event); }
  CudaTimingEvent(const CudaTimingEvent&) = delete;
  CudaTimingEvent& operator=(const CudaTimingEvent&) = delete;
};

}  // namespace zb::cuda
