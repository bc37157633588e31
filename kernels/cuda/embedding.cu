// Embedding lookup, and its deterministic backward: the (id, position) pairs are sorted by id with CUB's
// stable radix sort, then one warp per distinct id sums that id's gradient rows in position order and adds
// the sum to the table row once. No atomics: the same bits on every run.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace zb::cuda {

namespace {

constexpr int kThreads = 256;

// kWidth (1 or 8) consecutive values as floats: 8 with 16-byte accesses (c % 8 == 0, aligned rows); one
// element at a time leaves a memory-bound kernel far below the memory's rate.
template <typename T, int kWidth>
__device__ __forceinline__ void load_n(const T* p, float (&v)[kWidth]) {
  if constexpr (kWidth == 8) load8(p, v);
  else v[0] = to_float(*p);
}
template <typename T, int kWidth>
__device__ __forceinline__ void store_n(T* p, const float (&v)[kWidth]) {
  if constexpr (kWidth == 8) store8(p, v);
  else *p = from_float<T>(v[0]);
}

// kWidth columns a thread.
template <typename T, int kWidth>
__global__ void embedding_forward_kernel(const int32_t* ids, const T* table, T* out, int64_t n, int64_t c,
                                         bool accumulate) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, pieces = c / kWidth;
  if (i >= n * pieces) return;
  const int64_t row = i / pieces, col = (i % pieces) * kWidth;
  float value[kWidth];
  load_n(table + int64_t(ids[row]) * c + col, value);
  if (accumulate) {
    float before[kWidth];
    load_n(out + row * c + col, before);
#pragma unroll
    for (int e = 0; e < kWidth; ++e) value[e] = before[e] + value[e];
  }
  store_n(out + row * c + col, value);
}

__global__ void iota_kernel(int32_t* values, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) values[i] = int32_t(i);
}

// The entries [start, end) of one id in the sorted ids, for the warp at the run's first entry; start = -1 for
// every other warp. One warp per sorted entry.
struct IdRun {
  int64_t start = -1, end = -1;
};
__device__ __forceinline__ IdRun warp_id_run(const int32_t* sorted_ids, int64_t n) {
  const int64_t start = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (start >= n || (start > 0 && sorted_ids[start] == sorted_ids[start - 1])) return {};
  int64_t end = start + 1;
  while (end < n && sorted_ids[end] == sorted_ids[start]) ++end;
  return {start, end};
}

// Only the warp at the first entry of each id's run does the work: each lane sums kWidth columns of the run's
// gradient rows in position order and adds them to the table row.
template <typename T, int kWidth>
__global__ void embedding_backward_kernel(const int32_t* sorted_ids, const int32_t* sorted_positions, const T* dout,
                                          T* dtable, int64_t n, int64_t c) {
  const IdRun run = warp_id_run(sorted_ids, n);
  if (run.start < 0) return;
  T* row = dtable + int64_t(sorted_ids[run.start]) * c;
  for (int64_t col = int64_t(threadIdx.x % 32) * kWidth; col < c; col += 32 * kWidth) {
    float sum[kWidth] = {};
    for (int64_t k = run.start; k < run.end; ++k) {
      float part[kWidth];
      load_n(dout + int64_t(sorted_positions[k]) * c + col, part);
#pragma unroll
      for (int e = 0; e < kWidth; ++e) sum[e] += part[e];
    }
    float value[kWidth];
    load_n(row + col, value);
#pragma unroll
    for (int e = 0; e < kWidth; ++e) value[e] += sum[e];
    store_n(row + col, value);
  }
}

// Whole 8-column vectors with 16-byte accesses: c % 8 == 0 and every row start 16-byte aligned.
template <typename T>
bool eight_wide(int64_t c, const T* a, const T* b) {
  return c % 8 == 0 && vectorizable<T>(c, a, b);
}

// Scratch layout: sorted ids | positions | sorted positions | CUB's temporary storage.
struct SortBuffers {
  int32_t* sorted_ids;
  int32_t* positions;
  int32_t* sorted_positions;
  void* cub_storage;
  size_t cub_bytes;
};

size_t cub_sort_bytes(int64_t n) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                  static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), int(n));
  return bytes;
}

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

SortBuffers carve(Scratch scratch, int64_t n) {
  auto* base = static_cast<char*>(scratch.data);
  const size_t ids_bytes = aligned(size_t(n) * sizeof(int32_t));
  return {reinterpret_cast<int32_t*>(base), reinterpret_cast<int32_t*>(base + ids_bytes),
          reinterpret_cast<int32_t*>(base + 2 * ids_bytes), base + 3 * ids_bytes, cub_sort_bytes(n)};
}

int significant_bits(int64_t vocab) {
  int bits = 1;
  while ((int64_t(1) << bits) < vocab) ++bits;
  return bits;
}

}  // namespace

template <typename T>
void embedding_forward(const int32_t* ids, const T* table, T* out, int64_t n, int64_t c, bool accumulate,
                       cudaStream_t stream) {
  if (n * c == 0) return;
  const bool wide = eight_wide(c, table, static_cast<const T*>(out));
  auto* kernel = wide ? embedding_forward_kernel<T, 8> : embedding_forward_kernel<T, 1>;
  kernel<<<blocks_for(n * c / (wide ? 8 : 1), kThreads), kThreads, 0, stream>>>(ids, table, out, n, c, accumulate);
  ZB_CUDA_CHECK_LAUNCH();
}

size_t embedding_backward_scratch(int64_t n) { return 3 * aligned(size_t(n) * sizeof(int32_t)) + cub_sort_bytes(n); }

template <typename T>
void embedding_backward(const int32_t* ids, const T* dout, T* dtable, int64_t n, int64_t c, int64_t vocab,
                        Scratch scratch, cudaStream_t stream) {
  if (n == 0) return;
  ZB_CHECK(n <= 0x7fffffff, "embedding_backward sorts at most 2^31 - 1 ids, got ", n);  // CUB counts in int
  ZB_CHECK(scratch.bytes >= embedding_backward_scratch(n), "embedding_backward scratch too small");
  SortBuffers b = carve(scratch, n);
  iota_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(b.positions, n);
  ZB_CUDA_CHECK_LAUNCH();
  ZB_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(b.cub_storage, b.cub_bytes, ids, b.sorted_ids, b.positions,
                                                b.sorted_positions, int(n), 0, significant_bits(vocab), stream));
  auto* kernel = eight_wide(c, dout, static_cast<const T*>(dtable)) ? embedding_backward_kernel<T, 8>
                                                                     : embedding_backward_kernel<T, 1>;
  kernel<<<blocks_for(n, kThreads / 32), kThreads, 0, stream>>>(b.sorted_ids, b.sorted_positions, dout, dtable, n, c);
  ZB_CUDA_CHECK_LAUNCH();
}

#define ZB_INSTANTIATE(T)                                                                                \
  template void embedding_forward<T>(const int32_t*, const T*, T*, int64_t, int64_t, bool, cudaStream_t); \
  template void embedding_backward<T>(const int32_t*, const T*, T*, int64_t, int64_t, int64_t, Scratch,   \
                                      cudaStream_t);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(bf16)
ZB_INSTANTIATE(f16)

}  // namespace zb::cuda
