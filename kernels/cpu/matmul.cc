// Linear layers: out = inp weight^T + bias, and the three gradients. Plain loops over contiguous rows.
#include "kernels/cpu/cpu_ops.h"

namespace zb::cpu {

template <typename T>
void matmul_forward(const T* inp, const T* weight, const T* bias, T* out, int64_t n, int64_t k, int64_t m) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const T* x = inp + row * k;
    for (int64_t col = 0; col < m; ++col) {
      const T* w = weight + col * k;
      T acc = bias ? bias[col] : T(0);
      for (int64_t i = 0; i < k; ++i) acc += x[i] * w[i];
      out[row * m + col] = acc;
    }
  }
}

template <typename T>
void matmul_backward(const T* dout, const T* inp, const T* weight, T* dinp, T* dweight, T* dbias, int64_t n, int64_t k,
                     int64_t m) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    T* dx = dinp + row * k;
    for (int64_t i = 0; i < k; ++i) dx[i] = 0;
    for (int64_t col = 0; col < m; ++col) {
      const T g = dout[row * m + col];
      const T* w = weight + col * k;
      for (int64_t i = 0; i < k; ++i) dx[i] += g * w[i];
    }
  }
  // One thread per output feature: it alone writes that row of dweight and that bias element. (No dweight: a
  // frozen weight, whose gradient is not computed.)
#pragma omp parallel for schedule(static)
  for (int64_t col = 0; col < m; ++col) {
    T db = 0;
    for (int64_t row = 0; row < n; ++row) {
      const T g = dout[row * m + col];
      if (dweight) {
        T* dw = dweight + col * k;
        const T* x = inp + row * k;
        for (int64_t i = 0; i < k; ++i) dw[i] += g * x[i];
      }
      db += g;
    }
    if (dbias) dbias[col] += db;
  }
}

template <typename T>
void gemm(const T* a, bool transpose_a, const T* b, bool transpose_b, T alpha, bool accumulate, T* out, int64_t rows,
          int64_t inner, int64_t cols) {
  const int64_t a_row = transpose_a ? rows : inner, b_row = transpose_b ? inner : cols;  // row lengths as stored
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      T acc = 0;
      for (int64_t i = 0; i < inner; ++i) {
        const T x = transpose_a ? a[i * a_row + r] : a[r * a_row + i];
        const T y = transpose_b ? b[c * b_row + i] : b[i * b_row + c];
        acc += x * y;
      }
      out[r * cols + c] = (accumulate ? out[r * cols + c] : T(0)) + alpha * acc;
    }
  }
}

#define ZB_INSTANTIATE(T)                                                                         \
  template void matmul_forward<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t);   \
  template void matmul_backward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, int64_t);        \
  template void gemm<T>(const T*, bool, const T*, bool, T, bool, T*, int64_t, int64_t, int64_t);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(double)

}  // namespace zb::cpu
