// LayerNorm and RMSNorm, forward and backward: one warp per row for the row statistics and the input
// gradient; the gain and bias gradients through the deterministic column reduction, their partial sums formed
// in the same pass as the input gradient where the rows allow 16-byte access. The gain is gain_offset + weight,
// added in fp32 as the weight is read (0 for LayerNorm and Llama's RMSNorm, 1 for Gemma's).
#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/norm_row_teams.cuh"

namespace zb::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ int64_t warp_row() {
  return int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
}

// One warp per row. With a second input b (kResidual), the row is first formed as x = a + b, rounded to T and
// stored to `residual` (exactly what a separate residual add would store), then normalised; the passes that
// read x again hit the cache lines this warp just wrote. kVec8: lanes take 8 columns at a time (16-byte
// accesses for bf16), which needs c % 8 == 0 and 16-byte aligned rows.
template <typename T, bool kLayerNorm, bool kResidual, bool kVec8>
__global__ void norm_forward_kernel(const T* a, const T* b, T* residual, const T* weight, float gain_offset,
                                    const T* bias, float eps, T* out, float* mean, float* rstd, int64_t n, int64_t c) {
  constexpr int kWidth = kVec8 ? 8 : 1;
  const int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = (kResidual ? residual : a) + row * c;
  // Columns j .. j + kWidth - 1 of a row of p, as floats.
  auto load = [](const T* p, int64_t j, float (&v)[kWidth]) {
    if constexpr (kVec8) load8(p + j, v);
    else v[0] = to_float(p[j]);
  };
  auto store = [](T* p, int64_t j, const float (&v)[kWidth]) {
    if constexpr (kVec8) store8(p + j, v);
    else p[j] = from_float<T>(v[0]);
  };
  float sum = 0.0f;
  for (int64_t j = lane * kWidth; j < c; j += 32 * kWidth) {
    float x[kWidth];
    if constexpr (kResidual) {
      float y[kWidth];
      load(a + row * c, j, x), load(b + row * c, j, y);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) x[k] = to_float(from_float<T>(x[k] + y[k]));  // as stored
      store(residual + row * c, j, x);
    } else {
      load(xr, j, x);
    }
#pragma unroll
    for (int k = 0; k < kWidth; ++k) sum += x[k];
  }
  const float mu = kLayerNorm ? warp_sum(sum) / c : 0.0f;
  float sq = 0.0f;
  for (int64_t j = lane * kWidth; j < c; j += 32 * kWidth) {
    float x[kWidth];
    load(xr, j, x);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) sq += (x[k] - mu) * (x[k] - mu);
  }
  const float rs = rsqrtf(warp_sum(sq) / c + eps);
  for (int64_t j = lane * kWidth; j < c; j += 32 * kWidth) {
    float x[kWidth], w[kWidth], bb[kWidth];
    load(xr, j, x), load(weight, j, w);
    if constexpr (kLayerNorm) load(bias, j, bb);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      x[k] = (x[k] - mu) * rs * (gain_offset + w[k]);
      if constexpr (kLayerNorm) x[k] += bb[k];
    }
    store(out + row * c, j, x);
  }
  if (lane == 0) {
    if constexpr (kLayerNorm) mean[row] = mu;
    rstd[row] = rs;
  }
}

template <typename T, bool kLayerNorm, bool kResidual>
void launch_norm_forward(const T* a, const T* b, T* residual, const T* weight, float gain_offset, const T* bias,
                         float eps, T* out, float* mean, float* rstd, int64_t n, int64_t c, NormRows rows,
                         cudaStream_t stream) {
  const bool vec8 = c % 8 == 0 && vectorizable<T>(8, a, b, residual, weight, bias, out);
  const RowTeam team = row_team_for(c);
  if (vec8 && rows == NormRows::teams && team.fits() && n > 0) {
    auto* kernel = team.per_thread == 1 ? norm_forward_team_kernel<T, kLayerNorm, kResidual, 1>
                                        : norm_forward_team_kernel<T, kLayerNorm, kResidual, 2>;
    kernel<<<unsigned(n), team.threads, 0, stream>>>(a, b, residual, weight, gain_offset, bias, eps, out, mean, rstd,
                                                     c);
    ZB_CUDA_CHECK_LAUNCH();
    return;
  }
  const unsigned blocks = blocks_for(n, kWarpsPerBlock);
  if (vec8) {
    norm_forward_kernel<T, kLayerNorm, kResidual, true><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
        a, b, residual, weight, gain_offset, bias, eps, out, mean, rstd, n, c);
  } else {
    norm_forward_kernel<T, kLayerNorm, kResidual, false><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
        a, b, residual, weight, gain_offset, bias, eps, out, mean, rstd, n, c);
  }
  ZB_CUDA_CHECK_LAUNCH();
}

// The row's two reductions of the input gradient: sum(dnorm) and sum(dnorm * xhat), dnorm = dout * gain.
// Lanes take 8 columns at a time when kVec8 (16-byte loads), single columns otherwise.
template <bool kVec8, bool kLayerNorm, typename T>
__device__ __forceinline__ float2 row_sums(const T* dout, const T* x, const T* weight, float gain_offset, float mu,
                                           float rs, int64_t c) {
  const int lane = threadIdx.x % 32;
  float sum_dnorm = 0.0f, sum_dnorm_xhat = 0.0f;
  if constexpr (kVec8) {
    for (int64_t j = lane * 8; j < c; j += 32 * 8) {
      float g[8], xv[8], w[8];
      load8(dout + j, g), load8(x + j, xv), load8(weight + j, w);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        sum_dnorm += g[k] * (gain_offset + w[k]);
        sum_dnorm_xhat += g[k] * (gain_offset + w[k]) * (xv[k] - mu) * rs;
      }
    }
  } else {
    for (int64_t j = lane; j < c; j += 32) {
      const float dnorm = to_float(dout[j]) * (gain_offset + to_float(weight[j]));
      sum_dnorm += dnorm;
      sum_dnorm_xhat += dnorm * (to_float(x[j]) - mu) * rs;
    }
  }
  return make_float2(kLayerNorm ? warp_sum(sum_dnorm) : 0.0f, warp_sum(sum_dnorm_xhat));
}

// dx += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * gain
// (RMSNorm: no mean(dnorm) term and xhat = x * rstd). One warp per row.
template <typename T, bool kLayerNorm, bool kVec8>
__global__ void norm_backward_input_kernel(const T* dout, const T* x, const T* weight, float gain_offset,
                                           const float* mean, const float* rstd, T* dx, int64_t n, int64_t c) {
  const int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const float mu = kLayerNorm ? mean[row] : 0.0f, rs = rstd[row];
  dout += row * c, x += row * c, dx += row * c;
  const float2 sums = row_sums<kVec8, kLayerNorm>(dout, x, weight, gain_offset, mu, rs, c);
  const float mean_dnorm = sums.x / c, mean_dnorm_xhat = sums.y / c;
  auto grad = [&](float g, float w, float xv, float old) {
    return old + rs * (g * (gain_offset + w) - mean_dnorm - (xv - mu) * rs * mean_dnorm_xhat);
  };
  if constexpr (kVec8) {
    for (int64_t j = lane * 8; j < c; j += 32 * 8) {
      float g[8], xv[8], w[8], d[8];
      load8(dout + j, g), load8(x + j, xv), load8(weight + j, w), load8(dx + j, d);
#pragma unroll
      for (int k = 0; k < 8; ++k) d[k] = grad(g[k], w[k], xv[k], d[k]);
      store8(dx + j, d);
    }
  } else {
    for (int64_t j = lane; j < c; j += 32) {
      dx[j] = from_float<T>(grad(to_float(dout[j]), to_float(weight[j]), to_float(x[j]), to_float(dx[j])));
    }
  }
}

// The fused backward: the input gradient as above, and in the same pass over each row every lane adds its
// columns' gain and bias terms (dout * xhat, dout) into its warp's own slice of shared memory. Block b covers
// rows [32 b, 32 b + 32), one chunk of the column reduction, in equal shares per warp; the warps' slices are
// then added in warp order into the chunk's partial sums, which column_finish_kernel adds in a fixed order. So
// dout and x come from memory once instead of twice, and the result has the same bits on every run.
template <typename T, bool kLayerNorm>
__global__ void norm_backward_fused_kernel(const T* dout, const T* x, const T* weight, float gain_offset,
                                           const float* mean, const float* rstd, T* dx, int64_t n, int64_t c,
                                           int64_t chunks, float* partials) {
  constexpr int kOutputs = kLayerNorm ? 2 : 1;
  extern __shared__ float4 shared_terms[];  // [warp][output][column]
  float* const terms = reinterpret_cast<float*>(shared_terms);
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // This warp's slice: the gain terms of every column, then the bias terms (c % 8 == 0 keeps 8 aligned).
  float* const gain_terms = terms + int64_t(warp) * kOutputs * c;
  float* const bias_terms = gain_terms + c;
  const float zeros[8] = {};
  for (int64_t j = lane * 8; j < c; j += 32 * 8) {
    store8(gain_terms + j, zeros);
    if constexpr (kLayerNorm) store8(bias_terms + j, zeros);
  }

  const int rows_per_warp = int(kRowsPerChunk) / warps;
  const int64_t first = int64_t(blockIdx.x) * kRowsPerChunk + int64_t(warp) * rows_per_warp;
  for (int64_t row = first; row < min(n, first + rows_per_warp); ++row) {
    const float mu = kLayerNorm ? mean[row] : 0.0f, rs = rstd[row];
    const T* const g_row = dout + row * c;
    const T* const x_row = x + row * c;
    T* const dx_row = dx + row * c;
    const float2 sums = row_sums<true, kLayerNorm>(g_row, x_row, weight, gain_offset, mu, rs, c);
    const float mean_dnorm = sums.x / c, mean_dnorm_xhat = sums.y / c;
    for (int64_t j = lane * 8; j < c; j += 32 * 8) {
      float g[8], xv[8], w[8], d[8], gain[8], bias[8];
      load8(g_row + j, g), load8(x_row + j, xv), load8(weight + j, w), load8(dx_row + j, d);
      load8(gain_terms + j, gain);
      if constexpr (kLayerNorm) load8(bias_terms + j, bias);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float xhat = (xv[k] - mu) * rs;
        d[k] += rs * (g[k] * (gain_offset + w[k]) - mean_dnorm - xhat * mean_dnorm_xhat);
        gain[k] += g[k] * xhat;
        if constexpr (kLayerNorm) bias[k] += g[k];
      }
      store8(dx_row + j, d);
      store8(gain_terms + j, gain);
      if constexpr (kLayerNorm) store8(bias_terms + j, bias);
    }
  }
  __syncthreads();
  for (int64_t col = threadIdx.x; col < c; col += blockDim.x) {
    for (int o = 0; o < kOutputs; ++o) {
      float total = 0.0f;
      for (int w = 0; w < warps; ++w) total += terms[(int64_t(w) * kOutputs + o) * c + col];
      partials[(o * chunks + blockIdx.x) * c + col] = total;
    }
  }
}

// Shared memory per block of the fused backward: at most this much, so that two blocks fit on an SM.
constexpr size_t kFusedNormShared = 112 * 1024;

// The fused backward where its warps' slices fit (fewer warps per block for wide rows); false elsewhere.
template <typename T, bool kLayerNorm>
bool fused_norm_backward(const T* dout, const T* x, const T* weight, float gain_offset, const float* mean,
                         const float* rstd, T* dx, T* dweight, T* dbias, int64_t n, int64_t c, bool accumulate,
                         Scratch scratch, cudaStream_t stream) {
  constexpr int kOutputs = kLayerNorm ? 2 : 1;
  int warps = kWarpsPerBlock;
  while (warps > 1 && size_t(warps) * kOutputs * c * sizeof(float) > kFusedNormShared) warps /= 2;
  const size_t bytes = size_t(warps) * kOutputs * c * sizeof(float);
  if (bytes > kFusedNormShared) return false;
  const int64_t chunks = column_chunks(n);
  float* const partials = column_partials(scratch, chunks, c);
  auto* kernel = norm_backward_fused_kernel<T, kLayerNorm>;
  allow_dynamic_shared_memory(kernel, kFusedNormShared);
  kernel<<<blocks_for(chunks, 1), warps * 32, bytes, stream>>>(dout, x, weight, gain_offset, mean, rstd, dx, n, c,
                                                                chunks, partials);
  ZB_CUDA_CHECK_LAUNCH();
  column_finish(partials, chunks, c, dweight, dbias, accumulate, stream);
  return true;
}

// The team backward (norm_row_teams.cuh) where the row fits a team and a block of at least one team fits the
// multiprocessor's registers and shared memory (up to four teams where they fit); false elsewhere.
template <typename T, bool kLayerNorm>
bool team_norm_backward(const T* dout, const T* x, const T* weight, float gain_offset, const float* mean,
                        const float* rstd, T* dx, T* dweight, T* dbias, int64_t n, int64_t c, bool accumulate,
                        Scratch scratch, cudaStream_t stream) {
  constexpr int kOutputs = kLayerNorm ? 2 : 1;
  const RowTeam team = row_team_for(c);
  if (!team.fits() || n == 0) return false;
  auto* kernel = team.per_thread == 1 ? norm_backward_team_kernel<T, kLayerNorm, 1>
                                      : norm_backward_team_kernel<T, kLayerNorm, 2>;
  const int registers = registers_per_thread(kernel);
  const size_t shared_limit = max_shared_memory_per_block();
  auto fits = [&](int teams) {
    return int64_t(teams) * team.threads * registers <= 65536 &&
           team_backward_shared_bytes(teams, c, sizeof(T), kOutputs) <= shared_limit;
  };
  int teams = kMaxBackwardTeams;
  while (teams > 1 && !fits(teams)) teams /= 2;
  if (!fits(teams)) return false;
  const int64_t chunks = column_chunks(n);
  float* const partials = column_partials(scratch, chunks, c);
  const size_t bytes = team_backward_shared_bytes(teams, c, sizeof(T), kOutputs);
  allow_dynamic_shared_memory(kernel, bytes);
  kernel<<<unsigned(chunks), teams * team.threads, bytes, stream>>>(dout, x, weight, gain_offset, mean, rstd, dx, n,
                                                                    c, chunks, team.threads, partials);
  ZB_CUDA_CHECK_LAUNCH();
  column_finish(partials, chunks, c, dweight, dbias, accumulate, stream);
  return true;
}

// The gain and bias gradient terms of one element: dout * xhat and dout.
template <typename T, bool kLayerNorm>
struct NormParameterTerms {
  const T* dout;
  const T* x;
  const float* mean;
  const float* rstd;
  int64_t c;

  __device__ void vec8(int64_t row, int64_t col0, float (&a)[8], float (&b)[8]) const {
    float g[8], xv[8];
    load8(dout + row * c + col0, g);
    load8(x + row * c + col0, xv);
    const float mu = kLayerNorm ? mean[row] : 0.0f, rs = rstd[row];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      a[k] += g[k] * (xv[k] - mu) * rs;
      b[k] += g[k];
    }
  }
  __device__ float2 one(int64_t row, int64_t col) const {
    const float g = to_float(dout[row * c + col]);
    return make_float2(g * (to_float(x[row * c + col]) - (kLayerNorm ? mean[row] : 0.0f)) * rstd[row], g);
  }
};

template <typename T>
struct BiasTerms {
  const T* dout;
  int64_t c;
  __device__ void vec8(int64_t row, int64_t col0, float (&a)[8], float (&)[8]) const {
    float g[8];
    load8(dout + row * c + col0, g);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] += g[k];
  }
  __device__ float2 one(int64_t row, int64_t col) const { return make_float2(to_float(dout[row * c + col]), 0.0f); }
};

template <typename T, bool kLayerNorm>
void norm_backward(const T* dout, const T* x, const T* weight, float gain_offset, const float* mean,
                   const float* rstd, T* dx, T* dweight, T* dbias, int64_t n, int64_t c, bool accumulate,
                   NormRows rows, Scratch scratch, cudaStream_t stream) {
  // 8-column vectors when every row of every operand starts 16-byte aligned.
  const bool vec8 = c % 8 == 0 && vectorizable<T>(8, dout, x, weight, dx);
  if (vec8 && rows == NormRows::teams &&
      team_norm_backward<T, kLayerNorm>(dout, x, weight, gain_offset, mean, rstd, dx, dweight, dbias, n, c,
                                        accumulate, scratch, stream)) {
    return;
  }
  if (vec8 && fused_norm_backward<T, kLayerNorm>(dout, x, weight, gain_offset, mean, rstd, dx, dweight, dbias, n, c,
                                                  accumulate, scratch, stream)) {
    return;
  }
  const unsigned blocks = blocks_for(n, kWarpsPerBlock);
  if (vec8) {
    norm_backward_input_kernel<T, kLayerNorm, true>
        <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(dout, x, weight, gain_offset, mean, rstd, dx, n, c);
  } else {
    norm_backward_input_kernel<T, kLayerNorm, false>
        <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(dout, x, weight, gain_offset, mean, rstd, dx, n, c);
  }
  ZB_CUDA_CHECK_LAUNCH();
  column_reduce(n, c, vec8, NormParameterTerms<T, kLayerNorm>{dout, x, mean, rstd, c}, dweight, dbias, accumulate,
                scratch, stream);
}

}  // namespace

size_t column_reduce_scratch(int64_t n, int64_t c) { return size_t(2 * column_chunks(n) * c) * sizeof(float); }

template <typename T>
void layernorm_forward(const T* x, const T* weight, const T* bias, float eps, T* out, float* mean, float* rstd,
                       int64_t n, int64_t c, NormRows rows, cudaStream_t stream) {
  launch_norm_forward<T, true, false>(x, nullptr, nullptr, weight, 0.0f, bias, eps, out, mean, rstd, n, c, rows,
                                      stream);
}

template <typename T>
void residual_layernorm_forward(const T* a, const T* b, T* residual, const T* weight, const T* bias, float eps, T* out,
                                float* mean, float* rstd, int64_t n, int64_t c, NormRows rows, cudaStream_t stream) {
  launch_norm_forward<T, true, true>(a, b, residual, weight, 0.0f, bias, eps, out, mean, rstd, n, c, rows, stream);
}

template <typename T>
void residual_rmsnorm_forward(const T* a, const T* b, T* residual, const T* weight, float gain_offset, float eps,
                              T* out, float* rstd, int64_t n, int64_t c, NormRows rows, cudaStream_t stream) {
  launch_norm_forward<T, false, true>(a, b, residual, weight, gain_offset, nullptr, eps, out, nullptr, rstd, n, c,
                                      rows, stream);
}

template <typename T>
void layernorm_backward(const T* dout, const T* x, const T* weight, const float* mean, const float* rstd, T* dx,
                        T* dweight, T* dbias, int64_t n, int64_t c, bool accumulate, NormRows rows,
                        Scratch scratch, cudaStream_t stream) {
  norm_backward<T, true>(dout, x, weight, 0.0f, mean, rstd, dx, dweight, dbias, n, c, accumulate, rows, scratch,
                         stream);
}

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, float gain_offset, float eps, T* out, float* rstd, int64_t n,
                     int64_t c, NormRows rows, cudaStream_t stream) {
  launch_norm_forward<T, false, false>(x, nullptr, nullptr, weight, gain_offset, nullptr, eps, out, nullptr, rstd, n,
                                       c, rows, stream);
}

template <typename T>
void rmsnorm_backward(const T* dout, const T* x, const T* weight, float gain_offset, const float* rstd, T* dx,
                      T* dweight, int64_t n, int64_t c, bool accumulate, NormRows rows, Scratch scratch,
                      cudaStream_t stream) {
  norm_backward<T, false>(dout, x, weight, gain_offset, nullptr, rstd, dx, dweight, nullptr, n, c, accumulate, rows,
                          scratch, stream);
}

template <typename T>
void bias_backward(const T* dout, T* dbias, int64_t n, int64_t c, bool accumulate, Scratch scratch,
                   cudaStream_t stream) {
  const bool aligned = c % 8 == 0 && vectorizable<T>(8, dout);
  column_reduce<T>(n, c, aligned, BiasTerms<T>{dout, c}, dbias, static_cast<T*>(nullptr), accumulate, scratch,
                   stream);
}

#define ZB_INSTANTIATE(T)                                                                                          \
  template void layernorm_forward<T>(const T*, const T*, const T*, float, T*, float*, float*, int64_t, int64_t,    \
                                     NormRows, cudaStream_t);                                                     \
  template void layernorm_backward<T>(const T*, const T*, const T*, const float*, const float*, T*, T*, T*,         \
                                      int64_t, int64_t, bool, NormRows, Scratch, cudaStream_t);                   \
  template void rmsnorm_forward<T>(const T*, const T*, float, float, T*, float*, int64_t, int64_t, NormRows,       \
                                   cudaStream_t);                                                                 \
  template void residual_layernorm_forward<T>(const T*, const T*, T*, const T*, const T*, float, T*, float*, float*, \
                                              int64_t, int64_t, NormRows, cudaStream_t);                           \
  template void residual_rmsnorm_forward<T>(const T*, const T*, T*, const T*, float, float, T*, float*, int64_t,    \
                                            int64_t, NormRows, cudaStream_t);                                      \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, float, const float*, T*, T*, int64_t, int64_t,    \
                                    bool, NormRows, Scratch, cudaStream_t);                                       \
  template void bias_backward<T>(const T*, T*, int64_t, int64_t, bool, Scratch, cudaStream_t);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(bf16)
ZB_INSTANTIATE(f16)

}  // namespace zb::cuda
