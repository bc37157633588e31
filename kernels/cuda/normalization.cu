// LayerNorm and RMSNorm, forward and backward: one warp per row for the row statistics and the input
// gradient; the gain and bias gradients through the deterministic column reduction.
#include "kernels/cuda/column_reduce.cuh"

namespace zb::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ int64_t warp_row() {
  return int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
}

template <typename T, bool kLayerNorm>
__global__ void norm_forward_kernel(const T* x, const T* weight, const T* bias, float eps, T* out, float* mean,
                                    float* rstd, int64_t n, int64_t c) {
  const int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  float mu = 0.0f;
  if constexpr (kLayerNorm) {
    float sum = 0.0f;
    for (int64_t j = lane; j < c; j += 32) sum += to_float(xr[j]);
    mu = warp_sum(sum) / c;
  }
  float sq = 0.0f;
  for (int64_t j = lane; j < c; j += 32) {
    const float d = to_float(xr[j]) - mu;
    sq += d * d;
  }
  const float rs = rsqrtf(warp_sum(sq) / c + eps);
  for (int64_t j = lane; j < c; j += 32) {
    float y = (to_float(xr[j]) - mu) * rs * to_float(weight[j]);
    if constexpr (kLayerNorm) y += to_float(bias[j]);
    out[row * c + j] = from_float<T>(y);
  }
  if (lane == 0) {
    if constexpr (kLayerNorm) mean[row] = mu;
    rstd[row] = rs;
  }
}

// dx += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight
// (RMSNorm: no mean(dnorm) term and xhat = x * rstd).
template <typename T, bool kLayerNorm>
__global__ void norm_backward_input_kernel(const T* dout, const T* x, const T* weight, const float* mean,
                                           const float* rstd, T* dx, int64_t n, int64_t c) {
  const int64_t row = warp_row();
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const float mu = kLayerNorm ? mean[row] : 0.0f, rs = rstd[row];
  float sum_dnorm = 0.0f, sum_dnorm_xhat = 0.0f;
  for (int64_t j = lane; j < c; j += 32) {
    const float dnorm = to_float(dout[row * c + j]) * to_float(weight[j]);
    sum_dnorm += dnorm;
    sum_dnorm_xhat += dnorm * (to_float(x[row * c + j]) - mu) * rs;
  }
  const float mean_dnorm = kLayerNorm ? warp_sum(sum_dnorm) / c : 0.0f;
  const float mean_dnorm_xhat = warp_sum(sum_dnorm_xhat) / c;
  for (int64_t j = lane; j < c; j += 32) {
    const float dnorm = to_float(dout[row * c + j]) * to_float(weight[j]);
    const float xhat = (to_float(x[row * c + j]) - mu) * rs;
    const int64_t i = row * c + j;
    dx[i] = from_float<T>(to_float(dx[i]) + rs * (dnorm - mean_dnorm - xhat * mean_dnorm_xhat));
  }
}

template <typename T, bool kLayerNorm>
void norm_backward(const T* dout, const T* x, const T* weight, const float* mean, const float* rstd, T* dx,
                   T* dweight, T* dbias, int64_t n, int64_t c, Scratch scratch, cudaStream_t stream) {
  norm_backward_input_kernel<T, kLayerNorm>
      <<<blocks_for(n, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(dout, x, weight, mean, rstd, dx, n, c);
  ZB_CUDA_CHECK_LAUNCH();
  // dweight += sum_rows dout * xhat; dbias += sum_rows dout.
  auto values = [=] __device__(int64_t row, int64_t col) {
    const float g = to_float(dout[row * c + col]);
    const float xhat = (to_float(x[row * c + col]) - (kLayerNorm ? mean[row] : 0.0f)) * rstd[row];
    return make_float2(g * xhat, g);
  };
  column_reduce(n, c, values, dweight, dbias, scratch, stream);
}

}  // namespace

size_t column_reduce_scratch(int64_t n, int64_t c) { return size_t(2 * column_chunks(n) * c) * sizeof(float); }

template <typename T>
void layernorm_forward(const T* x, const T* weight, const T* bias, float eps, T* out, float* mean, float* rstd,
                       int64_t n, int64_t c, cudaStream_t stream) {
  norm_forward_kernel<T, true>
      <<<blocks_for(n, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(x, weight, bias, eps, out, mean, rstd, n, c);
  ZB_CUDA_CHECK_LAUNCH();
}

template <typename T>
void layernorm_backward(const T* dout, const T* x, const T* weight, const float* mean, const float* rstd, T* dx,
                        T* dweight, T* dbias, int64_t n, int64_t c, Scratch scratch, cudaStream_t stream) {
  norm_backward<T, true>(dout, x, weight, mean, rstd, dx, dweight, dbias, n, c, scratch, stream);
}

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, float eps, T* out, float* rstd, int64_t n, int64_t c,
                     cudaStream_t stream) {
  norm_forward_kernel<T, false>
      <<<blocks_for(n, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(x, weight, nullptr, eps, out, nullptr, rstd,
                                                                           n, c);
  ZB_CUDA_CHECK_LAUNCH();
}

template <typename T>
void rmsnorm_backward(const T* dout, const T* x, const T* weight, const float* rstd, T* dx, T* dweight, int64_t n,
                      int64_t c, Scratch scratch, cudaStream_t stream) {
  norm_backward<T, false>(dout, x, weight, nullptr, rstd, dx, dweight, nullptr, n, c, scratch, stream);
}

template <typename T>
void bias_backward(const T* dout, T* dbias, int64_t n, int64_t c, Scratch scratch, cudaStream_t stream) {
  auto values = [=] __device__(int64_t row, int64_t col) { return make_float2(to_float(dout[row * c + col]), 0.0f); };
  column_reduce<T>(n, c, values, dbias, nullptr, scratch, stream);
}

#define ZB_INSTANTIATE(T)                                                                                          \
  template void layernorm_forward<T>(const T*, const T*, const T*, float, T*, float*, float*, int64_t, int64_t,    \
                                     cudaStream_t);                                                               \
  template void layernorm_backward<T>(const T*, const T*, const T*, const float*, const float*, T*, T*, T*,         \
                                      int64_t, int64_t, Scratch, cudaStream_t);                                   \
  template void rmsnorm_forward<T>(const T*, const T*, float, T*, float*, int64_t, int64_t, cudaStream_t);         \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const float*, T*, T*, int64_t, int64_t, Scratch,  \
                                    cudaStream_t);                                                                \
  template void bias_backward<T>(const T*, T*, int64_t, int64_t, Scratch, cudaStream_t);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(bf16)

}  // namespace zb::cuda
