// Timing alternative kernels for the same work on the GPU, to keep the fastest: the GEMM algorithm choice
// (cublaslt_gemm.h) uses it on each shape's first use.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <vector>

namespace zb::cuda {

// Milliseconds per launch of each of `count` candidates: `launch(i)` enqueues candidate i once on `stream` and
// returns false when it cannot run (its time is then infinity). Rounds interleave the candidates, so a clock
// still rising favours none of them; each candidate's best round counts. Waits for the stream.
std::vector<float> time_candidates(size_t count, const std::function<bool(size_t)>& launch, cudaStream_t stream);

// The first candidate (the heuristic's pick) unless another is faster by more than `margin` (a fraction):
// differences within timing noise keep the default.
size_t fastest_candidate(const std::vector<float>& ms, double margin = 0.02);

}  // namespace zb::cuda
