#include "kernels/cuda/gemm_algorithm_timing.h"

#include <algorithm>
#include <limits>

#include "core/cuda_check.h"

namespace zb::cuda {

namespace {

struct Event {
  cudaEvent_t event = nullptr;
  Event() { ZB_CUDA_CHECK(cudaEventCreate(&event)); }
  ~Event() { cudaEventDestroy(event); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

}  // namespace

std::vector<float> time_candidates(size_t count, const std::function<bool(size_t)>& launch, cudaStream_t stream) {
  constexpr int kRounds = 5, kLaunchesPerRound = 3;
  std::vector<float> best(count, std::numeric_limits<float>::infinity());
  std::vector<bool> runs(count, true);
  for (size_t i = 0; i < count; ++i) runs[i] = launch(i);  // warm-up: first-use costs (module loading) stay out
  Event start, stop;
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < count; ++i) {
      if (!runs[i]) continue;
      ZB_CUDA_CHECK(cudaEventRecord(start.event, stream));
      for (int l = 0; l < kLaunchesPerRound; ++l) launch(i);
      ZB_CUDA_CHECK(cudaEventRecord(stop.event, stream));
      ZB_CUDA_CHECK(cudaEventSynchronize(stop.event));
      float ms = 0;
      ZB_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event, stop.event));
      best[i] = std::min(best[i], ms / kLaunchesPerRound);
    }
  }
  return best;
}

size_t fastest_candidate(const std::vector<float>& ms, double margin) {
  if (ms.empty()) return 0;
  const size_t fastest = size_t(std::min_element(ms.begin(), ms.end()) - ms.begin());
  return ms[0] <= ms[fastest] * (1.0 + margin) ? 0 : fastest;
}

}  // namespace zb::cuda
