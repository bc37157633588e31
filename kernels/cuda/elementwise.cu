// Elementwise kernels: dtype conversion, GELU (tanh), ReLU, SwiGLU, GeGLU, the residual add, scaling by a
// constant, dropout and the fills of initial values. Memory-bound:
// each thread moves 16-byte vectors when the sizes and pointers allow, one element otherwise.
#include "core/random.h"
#include "kernels/dropout_mask.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace zb::cuda {

namespace {

constexpr int kThreads = 256;

// Applies fn(i) for every i in [0, n): in vectors of kVec consecutive indices when vectorised.
template <int kVec, typename Fn>
__global__ void for_each_kernel(int64_t n, Fn fn) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * kVec;
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec; i < n; i += stride) fn(i);
}

template <int kVec, typename Fn>
void launch_for_each(int64_t n, cudaStream_t stream, Fn fn) {
  if (n == 0) return;
  const unsigned blocks = std::min<int64_t>(blocks_for((n + kVec - 1) / kVec, kThreads), 65535u * 8);
  for_each_kernel<kVec><<<blocks, kThreads, 0, stream>>>(n, fn);
  ZB_CUDA_CHECK_LAUNCH();
}

// out[i] = f(in[i]) (unary) elementwise, vectorised when possible.
template <typename T, typename F>
void unary(const T* in, T* out, int64_t n, cudaStream_t stream, F f) {
  constexpr int kVec = Vec16<T>::kSize;
  if (vectorizable<T>(n, in, out)) {
    launch_for_each<kVec>(n, stream, [=] __device__(int64_t i) {
      Vec16<T> x = load16(in + i), y;
#pragma unroll
      for (int k = 0; k < kVec; ++k) y.v[k] = from_float<T>(f(to_float(x.v[k])));
      store16(out + i, y);
    });
  } else {
    launch_for_each<1>(n, stream, [=] __device__(int64_t i) { out[i] = from_float<T>(f(to_float(in[i]))); });
  }
}

// out[i] = f(a[i], b[i]) elementwise, vectorised when possible.
template <typename T, typename F>
void binary(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream, F f) {
  constexpr int kVec = Vec16<T>::kSize;
  if (vectorizable<T>(n, a, b, out)) {
    launch_for_each<kVec>(n, stream, [=] __device__(int64_t i) {
      Vec16<T> x = load16(a + i), y = load16(b + i), z;
#pragma unroll
      for (int k = 0; k < kVec; ++k) z.v[k] = from_float<T>(f(to_float(x.v[k]), to_float(y.v[k])));
      store16(out + i, z);
    });
  } else {
    launch_for_each<1>(n, stream,
                       [=] __device__(int64_t i) { out[i] = from_float<T>(f(to_float(a[i]), to_float(b[i]))); });
  }
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));
}

// The gradients of a gated unit's act(gate) * up with respect to the gate and the up projection.
struct GatedGrad {
  float gate, up;
};
// silu(gate) * up, given the output's gradient g.
__device__ __forceinline__ GatedGrad swiglu_grad(float g, float gate, float up) {
  const float sig = 1.0f / (1.0f + expf(-gate));
  return {g * up * sig * (1.0f + gate * (1.0f - sig)), g * gate * sig};
}
// gelu(gate) * up, given the output's gradient g.
__device__ __forceinline__ GatedGrad geglu_grad(float g, float gate, float up) {
  return {g * up * gelu_grad(gate), g * gelu(gate)};
}

// A gated unit's rows hold the gate then the up projection, f wide each: out[row, j] = f(gate, up). Vectorised when
// every row's halves split into whole 16-byte vectors (f a multiple of the vector and aligned pointers); each vector
// then lies in one row.
template <typename T, typename F>
void gated_forward(const T* inp, T* out, int64_t n, int64_t f, cudaStream_t stream, F fn) {
  constexpr int kVec = Vec16<T>::kSize;
  if (f % kVec == 0 && vectorizable<T>(n * f, inp, out)) {
    launch_for_each<kVec>(n * f, stream, [=] __device__(int64_t i) {
      const int64_t row = i / f;
      const T* gate_at = inp + i + row * f;  // row * 2f + (i - row * f)
      const Vec16<T> gate = load16(gate_at), up = load16(gate_at + f);
      Vec16<T> y;
#pragma unroll
      for (int k = 0; k < kVec; ++k) y.v[k] = from_float<T>(fn(to_float(gate.v[k]), to_float(up.v[k])));
      store16(out + i, y);
    });
  } else {
    launch_for_each<1>(n * f, stream, [=] __device__(int64_t i) {
      const T* gate_at = inp + i + (i / f) * f;
      out[i] = from_float<T>(fn(to_float(gate_at[0]), to_float(gate_at[f])));
    });
  }
}

// Its backward: grad(g, gate, up) gives both halves' gradients.
template <typename T, typename G>
void gated_backward(const T* dout, const T* inp, T* dinp, int64_t n, int64_t f, cudaStream_t stream, G grad) {
  constexpr int kVec = Vec16<T>::kSize;
  if (f % kVec == 0 && vectorizable<T>(n * f, dout, inp, dinp)) {
    launch_for_each<kVec>(n * f, stream, [=] __device__(int64_t i) {
      const int64_t at = i + (i / f) * f;
      const Vec16<T> gate = load16(inp + at), up = load16(inp + at + f), g = load16(dout + i);
      Vec16<T> d_gate, d_up;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const GatedGrad d = grad(to_float(g.v[k]), to_float(gate.v[k]), to_float(up.v[k]));
        d_gate.v[k] = from_float<T>(d.gate), d_up.v[k] = from_float<T>(d.up);
      }
      store16(dinp + at, d_gate);
      store16(dinp + at + f, d_up);
    });
  } else {
    launch_for_each<1>(n * f, stream, [=] __device__(int64_t i) {
      const int64_t at = i + (i / f) * f;
      const GatedGrad d = grad(to_float(dout[i]), to_float(inp[at]), to_float(inp[at + f]));
      dinp[at] = from_float<T>(d.gate);
      dinp[at + f] = from_float<T>(d.up);
    });
  }
}

}  // namespace

template <typename S, typename D>
void convert(const S* src, D* dst, int64_t n, cudaStream_t stream) {
  launch_for_each<1>(n, stream, [=] __device__(int64_t i) { dst[i] = from_float<D>(to_float(src[i])); });
}

template <typename T>
void fill_normal(T* out, int64_t n, uint64_t seed, uint64_t random_stream, int64_t first, double std,
                 cudaStream_t stream) {
  launch_for_each<1>(n, stream, [=] __device__(int64_t i) {
    out[i] = from_float<T>(float(std * random_normal(seed, random_stream, uint64_t(first + i))));
  });
}

// A thread a group of four elements: one Philox draw gives their four words (dropout_keeps' rule).
template <typename T>
void dropout_mask(const T* x, double p, uint64_t seed, uint64_t stream_id, T* out, int64_t n, cudaStream_t stream) {
  const uint32_t threshold = dropout_threshold(p);
  launch_for_each<1>((n + 3) / 4, stream, [=] __device__(int64_t group) {
    const auto words = random_words(seed, stream_id, uint64_t(group));
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * group + k;
      if (i < n) out[i] = words[k] >= threshold ? x[i] : from_float<T>(0.0f);
    }
  });
}

template <typename T>
void fill_value(T* out, int64_t n, float value, cudaStream_t stream) {
  launch_for_each<1>(n, stream, [=] __device__(int64_t i) { out[i] = from_float<T>(value); });
}

template <typename T>
void gelu_forward(const T* inp, T* out, int64_t n, cudaStream_t stream) {
  unary(inp, out, n, stream, [] __device__(float x) { return gelu(x); });
}

template <typename T>
void gelu_backward(const T* dout, const T* inp, T* dinp, int64_t n, cudaStream_t stream) {
  binary(dout, inp, dinp, n, stream, [] __device__(float g, float x) { return g * gelu_grad(x); });
}

template <typename T>
void relu_forward(const T* inp, T* out, int64_t n, cudaStream_t stream) {
  unary(inp, out, n, stream, [] __device__(float x) { return x > 0.0f ? x : 0.0f; });
}

template <typename T>
void relu_backward(const T* dout, const T* inp, T* dinp, int64_t n, cudaStream_t stream) {
  binary(dout, inp, dinp, n, stream, [] __device__(float g, float x) { return x > 0.0f ? g : 0.0f; });
}

template <typename T>
void residual_forward(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  binary(a, b, out, n, stream, [] __device__(float x, float y) { return x + y; });
}

template <typename T>
void swiglu_forward(const T* inp, T* out, int64_t n, int64_t f, cudaStream_t stream) {
  gated_forward(inp, out, n, f, stream, [] __device__(float gate, float up) { return silu(gate) * up; });
}

template <typename T>
void swiglu_backward(const T* dout, const T* inp, T* dinp, int64_t n, int64_t f, cudaStream_t stream) {
  gated_backward(dout, inp, dinp, n, f, stream,
                 [] __device__(float g, float gate, float up) { return swiglu_grad(g, gate, up); });
}

// GELU's tanh form on the gate, as HF's gelu_pytorch_tanh; the product is rounded once (the model rounds gelu(gate)
// to the dtype before multiplying: bf16 results differ by that rounding).
template <typename T>
void geglu_forward(const T* inp, T* out, int64_t n, int64_t f, cudaStream_t stream) {
  gated_forward(inp, out, n, f, stream, [] __device__(float gate, float up) { return gelu(gate) * up; });
}

template <typename T>
void geglu_backward(const T* dout, const T* inp, T* dinp, int64_t n, int64_t f, cudaStream_t stream) {
  gated_backward(dout, inp, dinp, n, f, stream,
                 [] __device__(float g, float gate, float up) { return geglu_grad(g, gate, up); });
}

template <typename T>
void scale(const T* x, float factor, T* out, int64_t n, cudaStream_t stream) {
  unary(x, out, n, stream, [=] __device__(float v) { return v * factor; });
}

#define ZB_INSTANTIATE(T)                                                           \
  template void gelu_forward<T>(const T*, T*, int64_t, cudaStream_t);               \
  template void gelu_backward<T>(const T*, const T*, T*, int64_t, cudaStream_t);    \
  template void relu_forward<T>(const T*, T*, int64_t, cudaStream_t);               \
  template void relu_backward<T>(const T*, const T*, T*, int64_t, cudaStream_t);    \
  template void residual_forward<T>(const T*, const T*, T*, int64_t, cudaStream_t); \
  template void dropout_mask<T>(const T*, double, uint64_t, uint64_t, T*, int64_t, cudaStream_t); \
  template void swiglu_forward<T>(const T*, T*, int64_t, int64_t, cudaStream_t);    \
  template void swiglu_backward<T>(const T*, const T*, T*, int64_t, int64_t, cudaStream_t);  \
  template void geglu_forward<T>(const T*, T*, int64_t, int64_t, cudaStream_t);               \
  template void geglu_backward<T>(const T*, const T*, T*, int64_t, int64_t, cudaStream_t);    \
  template void scale<T>(const T*, float, T*, int64_t, cudaStream_t);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(bf16)
ZB_INSTANTIATE(f16)

template void fill_normal<float>(float*, int64_t, uint64_t, uint64_t, int64_t, double, cudaStream_t);
template void fill_normal<bf16>(bf16*, int64_t, uint64_t, uint64_t, int64_t, double, cudaStream_t);
template void fill_normal<f16>(f16*, int64_t, uint64_t, uint64_t, int64_t, double, cudaStream_t);
template void fill_value<float>(float*, int64_t, float, cudaStream_t);
template void fill_value<bf16>(bf16*, int64_t, float, cudaStream_t);
template void fill_value<f16>(f16*, int64_t, float, cudaStream_t);

template void convert<float, bf16>(const float*, bf16*, int64_t, cudaStream_t);
template void convert<bf16, float>(const bf16*, float*, int64_t, cudaStream_t);
template void convert<float, float>(const float*, float*, int64_t, cudaStream_t);
template void convert<bf16, bf16>(const bf16*, bf16*, int64_t, cudaStream_t);
template void convert<float, f16>(const float*, f16*, int64_t, cudaStream_t);
template void convert<f16, float>(const f16*, float*, int64_t, cudaStream_t);
template void convert<f16, f16>(const f16*, f16*, int64_t, cudaStream_t);
template void convert<bf16, f16>(const bf16*, f16*, int64_t, cudaStream_t);
template void convert<f16, bf16>(const f16*, bf16*, int64_t, cudaStream_t);

}  // namespace zb::cuda
