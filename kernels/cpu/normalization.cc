// LayerNorm and RMSNorm over the last axis, forward and backward.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace zb::cpu {

namespace {

// dweight[j] += sum_rows dout * xhat, dbias[j] += sum_rows dout: one thread per column, rows in order.
template <typename T, typename XHat>
void accumulate_norm_parameter_grads(const T* dout, T* dweight, T* dbias, int64_t n, int64_t c, XHat xhat) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < c; ++j) {
    T dw = 0, db = 0;
    for (int64_t row = 0; row < n; ++row) {
      dw += dout[row * c + j] * xhat(row, j);
      db += dout[row * c + j];
    }
    dweight[j] += dw;
    if (dbias) dbias[j] += db;
  }
}

}  // namespace

template <typename T>
void layernorm_forward(const T* x, const T* weight, const T* bias, T eps, T* out, T* mean, T* rstd, int64_t n,
                       int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const T* xr = x + row * c;
    T sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += xr[j];
    const T mu = sum / c;
    T var = 0;
    for (int64_t j = 0; j < c; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    const T rs = 1 / std::sqrt(var / c + eps);
    for (int64_t j = 0; j < c; ++j) out[row * c + j] = (xr[j] - mu) * rs * weight[j] + bias[j];
    mean[row] = mu;
    rstd[row] = rs;
  }
}

template <typename T>
void layernorm_backward(const T* dout, const T* x, const T* weight, const T* mean, const T* rstd, T* dx, T* dweight,
                        T* dbias, int64_t n, int64_t c) {
  auto xhat = [&](int64_t row, int64_t j) { return (x[row * c + j] - mean[row]) * rstd[row]; };
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    T mean_dnorm = 0, mean_dnorm_xhat = 0;
    for (int64_t j = 0; j < c; ++j) {
      const T dnorm = dout[row * c + j] * weight[j];
      mean_dnorm += dnorm;
      mean_dnorm_xhat += dnorm * xhat(row, j);
    }
    mean_dnorm /= c;
    mean_dnorm_xhat /= c;
    for (int64_t j = 0; j < c; ++j) {
      const T dnorm = dout[row * c + j] * weight[j];
      dx[row * c + j] += rstd[row] * (dnorm - mean_dnorm - xhat(row, j) * mean_dnorm_xhat);
    }
  }
  accumulate_norm_parameter_grads(dout, dweight, dbias, n, c, xhat);
}

// The gain of column j: weight[j], offset by gain_offset where the model's norms carry one (Gemma's 1 + w). With
// no offset the weight is used as it is, so that those models' results keep their bits.
template <typename T>
T gain(const T* weight, T gain_offset, int64_t j) {
  return gain_offset == 0 ? weight[j] : gain_offset + weight[j];
}

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, T gain_offset, T eps, T* out, T* rstd, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const T* xr = x + row * c;
    T sum_sq = 0;
    for (int64_t j = 0; j < c; ++j) sum_sq += xr[j] * xr[j];
    const T rs = 1 / std::sqrt(sum_sq / c + eps);
    for (int64_t j = 0; j < c; ++j) out[row * c + j] = xr[j] * rs * gain(weight, gain_offset, j);
    rstd[row] = rs;
  }
}

template <typename T>
void rmsnorm_backward(const T* dout, const T* x, const T* weight, T gain_offset, const T* rstd, T* dx, T* dweight,
                      int64_t n, int64_t c) {
  auto xhat = [&](int64_t row, int64_t j) { return x[row * c + j] * rstd[row]; };
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    T mean_dnorm_xhat = 0;
    for (int64_t j = 0; j < c; ++j) mean_dnorm_xhat += dout[row * c + j] * gain(weight, gain_offset, j) * xhat(row, j);
    mean_dnorm_xhat /= c;
    for (int64_t j = 0; j < c; ++j) {
      const T dnorm = dout[row * c + j] * gain(weight, gain_offset, j);
      dx[row * c + j] += rstd[row] * (dnorm - xhat(row, j) * mean_dnorm_xhat);
    }
  }
  accumulate_norm_parameter_grads<T>(dout, dweight, nullptr, n, c, xhat);
}

#define ZB_INSTANTIATE(T)                                                                                         \
  template void layernorm_forward<T>(const T*, const T*, const T*, T, T*, T*, T*, int64_t, int64_t);              \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, int64_t,       \
                                      int64_t);                                                                   \
  template void rmsnorm_forward<T>(const T*, const T*, T, T, T*, T*, int64_t, int64_t);                           \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, T, const T*, T*, T*, int64_t, int64_t);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(double)

}  // namespace zb::cpu
