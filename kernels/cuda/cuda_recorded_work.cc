#include "kernels/cuda/cuda_recorded_work.h"

#include "core/check.h"
#include "core/cuda_check.h"
#include "core/strings.h"

namespace zb::cuda {

std::unique_ptr<CudaRecordedWork> CudaRecordedWork::instantiate(cudaGraph_t graph, cudaStream_t stream,
                                                                uint64_t generation, const uint64_t& current_generation,
                                                                std::string& why_not) {
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the instantiated graph is a copy
  if (status != cudaSuccess) {
    cudaGetLastError();
    why_not = cat("the captured graph could not be instantiated: ", cudaGetErrorString(status));
    return nullptr;
  }
  std::unique_ptr<CudaRecordedWork> work(new CudaRecordedWork(exec, stream, generation, current_generation));
  ZB_CUDA_CHECK(cudaGraphUpload(exec, stream));  // so that the first replay starts as fast as the later ones
  return work;
}

void CudaRecordedWork::replay() {
  ZB_CHECK(!stale(), "replay of a stale recording");
  ZB_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
}

}  // namespace zb::cuda
