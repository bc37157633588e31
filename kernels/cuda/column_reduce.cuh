// Deterministic sums over the rows of an [n, c] matrix, per column: the parameter gradients of the norms
// and the bias gradient. Phase 1: each block sums a fixed chunk of rows for 256 columns into fp32 partials;
// phase 2: one thread per column adds the chunks in order and accumulates into the destination. No atomics,
// so the result has the same bits on every run.
#pragma once

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace zb::cuda {

constexpr int kColumnThreads = 256;
constexpr int64_t kRowsPerChunk = 64;

inline int64_t column_chunks(int64_t n) { return (n + kRowsPerChunk - 1) / kRowsPerChunk; }

// values(row, col) returns the pair of terms summed into output 0 and output 1 (the second may be unused).
template <int kOutputs, typename Values>
__global__ void column_partials_kernel(int64_t n, int64_t c, Values values, float* partials) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (col >= c) return;
  float acc[kOutputs] = {};
  const int64_t end = min(n, (chunk + 1) * kRowsPerChunk);
  for (int64_t row = chunk * kRowsPerChunk; row < end; ++row) {
    const float2 v = values(row, col);
    acc[0] += v.x;
    if constexpr (kOutputs > 1) acc[1] += v.y;
  }
  for (int k = 0; k < kOutputs; ++k) partials[(int64_t(k) * gridDim.y + chunk) * c + col] = acc[k];
}

template <typename T>
__global__ void column_finish_kernel(const float* partials, int64_t chunks, int64_t c, T* out0, T* out1) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= c) return;
  T* outs[2] = {out0, out1};
  for (int k = 0; k < 2; ++k) {
    if (!outs[k]) continue;
    float sum = 0.0f;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += partials[(k * chunks + chunk) * c + col];
    outs[k][col] = from_float<T>(to_float(outs[k][col]) + sum);
  }
}

// out0[col] += sum_row values(row, col).x; out1 (if not null) likewise with .y.
template <typename T, typename Values>
void column_reduce(int64_t n, int64_t c, Values values, T* out0, T* out1, Scratch scratch, cudaStream_t stream) {
  const int64_t chunks = column_chunks(n);
  ZB_CHECK(scratch.bytes >= size_t(2 * chunks * c) * sizeof(float), "column_reduce scratch too small");
  auto* partials = static_cast<float*>(scratch.data);
  const dim3 grid(blocks_for(c, kColumnThreads), unsigned(chunks));
  if (out1) {
    column_partials_kernel<2><<<grid, kColumnThreads, 0, stream>>>(n, c, values, partials);
  } else {
    column_partials_kernel<1><<<grid, kColumnThreads, 0, stream>>>(n, c, values, partials);
  }
  ZB_CUDA_CHECK_LAUNCH();
  column_finish_kernel<T><<<blocks_for(c, kColumnThreads), kColumnThreads, 0, stream>>>(partials, chunks, c, out0, out1);
  ZB_CUDA_CHECK_LAUNCH();
}

}  // namespace zb::cuda
