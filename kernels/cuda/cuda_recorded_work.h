// The CUDA backend's RecordedWork: what a stream capture recorded, instantiated as a CUDA graph and launched on
// the backend's stream. Replaying skips issuing each kernel and memset of the work again (a gpt2 pass is about
// 570 of them), and the device starts a graph's nodes after shorter gaps than launches issued one by one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace zb::cuda {

class CudaRecordedWork final : public RecordedWork {
 public:
  // Instantiates `graph` (destroyed here) for launches on `stream`. The backend's buffers and choices were at
  // `generation` when it was captured; `current_generation` is where the backend counts their changes. nullptr
  // and why not where the graph could not be instantiated.
  static std::unique_ptr<CudaRecordedWork> instantiate(cudaGraph_t graph, cudaStream_t stream, uint64_t generation,
                                                       const uint64_t& current_generation, std::string& why_not);
  ~CudaRecordedWork() override { cudaGraphExecDestroy(exec_); }
  CudaRecordedWork(const CudaRecordedWork&) = delete;
  CudaRecordedWork& operator=(const CudaRecordedWork&) = delete;

  bool stale() const override { return generation_ != current_generation_; }
  void replay() override;

 private:
  CudaRecordedWork(cudaGraphExec_t exec, cudaStream_t stream, uint64_t generation, const uint64_t& current_generation)
      : exec_(exec), stream_(stream), generation_(generation), current_generation_(current_generation) {}

  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  uint64_t generation_;
  const uint64_t& current_generation_;
};

}  // namespace zb::cuda
