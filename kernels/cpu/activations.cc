// Elementwise activations (GELU tanh, ReLU, SwiGLU, GeGLU), the residual add and scaling by a constant.
#include <cmath>
#include <numbers>
#include <utility>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/dropout_mask.h"

namespace zb::cpu {

namespace {

// GELU's tanh form and its derivative.
template <typename T>
T gelu(T x) {
  const T k = std::sqrt(T(2) / std::numbers::pi_v<T>);
  return T(0.5) * x * (1 + std::tanh(k * (x + T(0.044715) * x * x * x)));
}

template <typename T>
T gelu_grad(T x) {
  const T k = std::sqrt(T(2) / std::numbers::pi_v<T>);
  const T th = std::tanh(k * (x + T(0.044715) * x * x * x));
  const T dth = (1 - th * th) * k * (1 + 3 * T(0.044715) * x * x);
  return T(0.5) * ((1 + th) + x * dth);
}

}  // namespace

template <typename T>
void gelu_forward(const T* inp, T* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = gelu(inp[i]);
}

template <typename T>
void gelu_backward(const T* dout, const T* inp, T* dinp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dinp[i] = dout[i] * gelu_grad(inp[i]);
}

template <typename T>
void relu_forward(const T* inp, T* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] > 0 ? inp[i] : T(0);
}

template <typename T>
void relu_backward(const T* dout, const T* inp, T* dinp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dinp[i] = inp[i] > 0 ? dout[i] : T(0);
}

// The gated MLPs' activations over rows holding the gate's f values, then the up projection's: out = act(gate) * up,
// and the backward, where gradient(g, gate, up) gives {d gate, d up} for the output's gradient g.
template <typename T, typename Activation>
void gated_forward(const T* inp, T* out, int64_t n, int64_t f, Activation activated) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t j = 0; j < f; ++j) out[row * f + j] = activated(inp[row * 2 * f + j], inp[row * 2 * f + f + j]);
  }
}

template <typename T, typename Gradient>
void gated_backward(const T* dout, const T* inp, T* dinp, int64_t n, int64_t f, Gradient gradient) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t j = 0; j < f; ++j) {
      const auto [d_gate, d_up] = gradient(dout[row * f + j], inp[row * 2 * f + j], inp[row * 2 * f + f + j]);
      dinp[row * 2 * f + j] = d_gate;
      dinp[row * 2 * f + f + j] = d_up;
    }
  }
}

template <typename T>
void swiglu_forward(const T* inp, T* out, int64_t n, int64_t f) {
  gated_forward(inp, out, n, f, [](T gate, T up) { return gate / (1 + std::exp(-gate)) * up; });
}

template <typename T>
void swiglu_backward(const T* dout, const T* inp, T* dinp, int64_t n, int64_t f) {
  gated_backward(dout, inp, dinp, n, f, [](T g, T gate, T up) {
    const T sig = 1 / (1 + std::exp(-gate));
    return std::pair<T, T>{g * up * sig * (1 + gate * (1 - sig)), g * gate * sig};  // d silu/dx = s (1 + x (1 - s))
  });
}

template <typename T>
void geglu_forward(const T* inp, T* out, int64_t n, int64_t f) {
  gated_forward(inp, out, n, f, [](T gate, T up) { return gelu(gate) * up; });
}

template <typename T>
void geglu_backward(const T* dout, const T* inp, T* dinp, int64_t n, int64_t f) {
  gated_backward(dout, inp, dinp, n, f,
                 [](T g, T gate, T up) { return std::pair<T, T>{g * up * gelu_grad(gate), g * gelu(gate)}; });
}

template <typename T>
void residual_forward(const T* a, const T* b, T* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void scale(const T* x, T factor, T* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * factor;
}

template <typename T>
void dropout_mask(const T* x, double p, uint64_t seed, uint64_t stream, T* out, int64_t n) {
  const uint32_t threshold = dropout_threshold(p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = dropout_keeps(seed, stream, uint64_t(i), threshold) ? x[i] : T(0);
}

#define ZB_INSTANTIATE(T)                                                        \
  template void dropout_mask<T>(const T*, double, uint64_t, uint64_t, T*, int64_t); \
  template void gelu_forward<T>(const T*, T*, int64_t);                         \
  template void gelu_backward<T>(const T*, const T*, T*, int64_t);              \
  template void relu_forward<T>(const T*, T*, int64_t);                         \
  template void relu_backward<T>(const T*, const T*, T*, int64_t);              \
  template void swiglu_forward<T>(const T*, T*, int64_t, int64_t);              \
  template void swiglu_backward<T>(const T*, const T*, T*, int64_t, int64_t);   \
  template void geglu_forward<T>(const T*, T*, int64_t, int64_t);               \
  template void geglu_backward<T>(const T*, const T*, T*, int64_t, int64_t);    \
  template void residual_forward<T>(const T*, const T*, T*, int64_t);           \
  template void scale<T>(const T*, T, T*, int64_t);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(double)

}  // namespace zb::cpu
