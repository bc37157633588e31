// Deterministic sums over the rows of an [n, c] matrix, per column: the parameter gradients of the norms
// and the bias gradient. Phase 1: each thread sums 8 adjacent columns (16-byte loads) over a fixed chunk of
// rows into fp32 partials; phase 2: per column, 32 or 64 thread groups sum interleaved chunks and then combine
// in a fixed order, adding the result to the destination. No atomics: the same bits on every run.
// Where c is not a multiple of 8 (or rows are not 16-byte aligned) one thread per column adds all rows.
//
// Terms supplies the summands: vec8(row, col0, a, b) adds columns col0..col0+7 of a row into a[8] (and b[8]);
// one(row, col) returns the two terms of one element.
#pragma once

#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace zb::cuda {

constexpr int64_t kRowsPerChunk = 32;

inline int64_t column_chunks(int64_t n) { return (n + kRowsPerChunk - 1) / kRowsPerChunk; }

// Eight consecutive elements as floats (one 16-byte load for bf16, two for fp32).
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&out)[8]) {
  constexpr int kVec = Vec16<T>::kSize;
#pragma unroll
  for (int part = 0; part < 8 / kVec; ++part) {
    const Vec16<T> v = load16(p + part * kVec);
#pragma unroll
    for (int k = 0; k < kVec; ++k) out[part * kVec + k] = to_float(v.v[k]);
  }
}

// Eight floats stored as T (16-byte stores).
template <typename T>
__device__ __forceinline__ void store8(T* p, const float (&v)[8]) {
  constexpr int kVec = Vec16<T>::kSize;
#pragma unroll
  for (int part = 0; part < 8 / kVec; ++part) {
    Vec16<T> out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) out.v[k] = from_float<T>(v[part * kVec + k]);
    store16(p + part * kVec, out);
  }
}

// Chunk j of the rows is summed by block row j mod gridDim.y (the grid's y extent is capped at 65535).
template <int kOutputs, typename Terms>
__global__ void column_partials_kernel(int64_t n, int64_t c, int64_t chunks, Terms terms, float* partials) {
  const int64_t col0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (col0 >= c) return;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    float a[8] = {}, b[8] = {};
    const int64_t end = min(n, (chunk + 1) * kRowsPerChunk);
    // Unrolled so that several rows' loads are in flight at once (each row's add waits only for its own load).
#pragma unroll 8
    for (int64_t row = chunk * kRowsPerChunk; row < end; ++row) terms.vec8(row, col0, a, b);
    float* out = partials + chunk * c + col0;
    reinterpret_cast<float4*>(out)[0] = make_float4(a[0], a[1], a[2], a[3]);
    reinterpret_cast<float4*>(out)[1] = make_float4(a[4], a[5], a[6], a[7]);
    if constexpr (kOutputs > 1) {
      out += chunks * c;
      reinterpret_cast<float4*>(out)[0] = make_float4(b[0], b[1], b[2], b[3]);
      reinterpret_cast<float4*>(out)[1] = make_float4(b[4], b[5], b[6], b[7]);
    }
  }
}

// Block x covers kFinishColumns columns of every output with kFinishThreads threads: thread t takes column
// t % kFinishColumns and group g = t / kFinishColumns; the groups are split evenly among the outputs, and group s
// of an output adds chunks s, s + groups, ... of it; then one thread per column and output adds its groups'
// sums in group order. A fixed order throughout: the same bits on every run. (Eight warps per 32 columns, one
// output after the other, left gpt2's 512 chunks to 24 blocks of 64 dependent loads a warp.)
constexpr int kFinishColumns = 16, kFinishThreads = 1024, kFinishGroups = kFinishThreads / kFinishColumns;

template <typename T>
__global__ void __launch_bounds__(kFinishThreads) column_finish_kernel(const float* partials, int64_t chunks,
                                                                       int64_t c, T* out0, T* out1,
                                                                       bool accumulate) {
  __shared__ float sums[kFinishGroups][kFinishColumns];
  const int outputs = out1 ? 2 : 1, groups = kFinishGroups / outputs;
  const int column_in_block = int(threadIdx.x) % kFinishColumns, group = int(threadIdx.x) / kFinishColumns;
  const int output = group / groups, share = group % groups;
  const int64_t col = int64_t(blockIdx.x) * kFinishColumns + column_in_block;
  float acc = 0.0f;
  if (col < c) {
    const float* column = partials + output * chunks * c + col;
#pragma unroll 4
    for (int64_t chunk = share; chunk < chunks; chunk += groups) acc += column[chunk * c];
  }
  sums[group][column_in_block] = acc;
  __syncthreads();
  if (int(threadIdx.x) >= outputs * kFinishColumns) return;
  const int mine = int(threadIdx.x) / kFinishColumns, at = int(threadIdx.x) % kFinishColumns;
  const int64_t out_col = int64_t(blockIdx.x) * kFinishColumns + at;
  if (out_col >= c) return;
  float total = 0.0f;
  for (int s = 0; s < groups; ++s) total += sums[mine * groups + s][at];
  T* const out = mine == 0 ? out0 : out1;
  out[out_col] = from_float<T>(accumulate ? to_float(out[out_col]) + total : total);
}

template <typename T, typename Terms>
__global__ void column_scalar_kernel(int64_t n, int64_t c, Terms terms, T* out0, T* out1, bool accumulate) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= c) return;
  float a = 0.0f, b = 0.0f;
  for (int64_t row = 0; row < n; ++row) {
    const float2 v = terms.one(row, col);
    a += v.x;
    b += v.y;
  }
  out0[col] = from_float<T>(accumulate ? to_float(out0[col]) + a : a);
  if (out1) out1[col] = from_float<T>(accumulate ? to_float(out1[col]) + b : b);
}

// The [2][chunks][c] fp32 partial sums of the column reductions, in `scratch` (column_reduce_scratch bytes).
inline float* column_partials(Scratch scratch, int64_t chunks, int64_t c) {
  ZB_CHECK(scratch.bytes >= size_t(2 * chunks * c) * sizeof(float), "column_reduce scratch too small");
  return static_cast<float*>(scratch.data);
}

// Phase 2: out0[col] (and out1[col], if not null) += the sum of its column's partials, in chunk order (= when
// not accumulating).
template <typename T>
void column_finish(const float* partials, int64_t chunks, int64_t c, T* out0, T* out1, bool accumulate,
                   cudaStream_t stream) {
  column_finish_kernel<T>
      <<<blocks_for(c, kFinishColumns), kFinishThreads, 0, stream>>>(partials, chunks, c, out0, out1, accumulate);
  ZB_CUDA_CHECK_LAUNCH();
}

// out0[col] += sum_row a-terms, out1[col] (if not null) += sum_row b-terms (= when not accumulating).
// `aligned` says that every row the terms read starts 16-byte aligned.
template <typename T, typename Terms>
void column_reduce(int64_t n, int64_t c, bool aligned, Terms terms, T* out0, T* out1, bool accumulate,
                   Scratch scratch, cudaStream_t stream) {
  if (c % 8 != 0 || !aligned) {
    column_scalar_kernel<<<blocks_for(c, 256), 256, 0, stream>>>(n, c, terms, out0, out1, accumulate);
    ZB_CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t chunks = column_chunks(n);
  float* const partials = column_partials(scratch, chunks, c);
  const int threads = int(std::min<int64_t>(256, (c / 8 + 31) / 32 * 32));
  const dim3 grid(blocks_for(c / 8, threads), unsigned(std::min<int64_t>(chunks, 65535)));
  if (out1) {
    column_partials_kernel<2><<<grid, threads, 0, stream>>>(n, c, chunks, terms, partials);
  } else {
    column_partials_kernel<1><<<grid, threads, 0, stream>>>(n, c, chunks, terms, partials);
  }
  ZB_CUDA_CHECK_LAUNCH();
  column_finish(partials, chunks, c, out0, out1, accumulate, stream);
}

}  // namespace zb::cuda
