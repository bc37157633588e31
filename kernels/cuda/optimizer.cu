// The fused optimizer update (AdamW, Adam, SGD with momentum) over fp32 master weights and moments, with
// the gradient scale (clipping) folded in and the model's copy of the weights written in its dtype; and the
// deterministic sum of squares behind the global gradient norm; and the step's other scalars (the loss summed
// over tokens, the clipping factor), kept on the device so that a step runs without the host reading them.
#include "kernels/adam_element.h"
#include "kernels/clip_factor.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace zb::cuda {

namespace {

constexpr int kThreads = 256;

// Takes the device's gradient factor into grad_scale where there is one (OptimizerParams::grad_factor); false
// when it says to skip the step.
__device__ __forceinline__ bool resolve_factor(const float* grad_factor, float& grad_scale) {
  if (grad_factor == nullptr) return true;
  grad_scale = *grad_factor;
  return isfinite(grad_scale);
}

// One element of Adam(W) (kernels/adam_element.h, in the order torch's single-tensor AdamW computes it) with
// the step's gradient scale.
struct AdamStep {
  AdamElement<float> adam;
  float grad_scale;
  const float* grad_factor;  // see OptimizerParams::grad_factor
  __device__ __forceinline__ bool resolve_factor() { return zb::cuda::resolve_factor(grad_factor, grad_scale); }
  __device__ __forceinline__ float apply(float p, float& m, float& v, float grad) const {
    return adam(p, grad * grad_scale, m, v);
  }
};

template <typename T>
__global__ void adam_kernel(float* master, const T* grad, float* m, float* v, T* params_out, int64_t n, AdamStep step) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n || !step.resolve_factor()) return;
  float mi = m[i], vi = v[i];
  const float p = step.apply(master[i], mi, vi, to_float(grad[i]));
  m[i] = mi;
  v[i] = vi;
  master[i] = p;
  if (params_out) params_out[i] = from_float<T>(p);
}

// Four consecutive elements of T in one access (8 bytes of bf16, 16 of fp32).
template <typename T>
struct alignas(4 * sizeof(T)) Four {
  T v[4];
};

// As adam_kernel, four elements a thread with 16-byte accesses to the fp32 arrays: the update moves 28 bytes
// an element and nothing else, so the width of its accesses is what sets its rate.
template <typename T>
__global__ void adam4_kernel(float4* master, const Four<T>* grad, float4* m, float4* v, Four<T>* params_out,
                             int64_t quads, AdamStep step) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= quads || !step.resolve_factor()) return;
  const Four<T> g = grad[i];
  float4 p = master[i], mi = m[i], vi = v[i];
  p.x = step.apply(p.x, mi.x, vi.x, to_float(g.v[0]));
  p.y = step.apply(p.y, mi.y, vi.y, to_float(g.v[1]));
  p.z = step.apply(p.z, mi.z, vi.z, to_float(g.v[2]));
  p.w = step.apply(p.w, mi.w, vi.w, to_float(g.v[3]));
  m[i] = mi;
  v[i] = vi;
  master[i] = p;
  if (params_out) params_out[i] = Four<T>{{from_float<T>(p.x), from_float<T>(p.y), from_float<T>(p.z), from_float<T>(p.w)}};
}

template <typename T>
__global__ void sgd_kernel(float* master, const T* grad, float* momentum_buffer, T* params_out, int64_t n, float lr,
                           float momentum, float weight_decay, float grad_scale, const float* grad_factor) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n || !resolve_factor(grad_factor, grad_scale)) return;
  float p = master[i];
  const float g = to_float(grad[i]) * grad_scale + weight_decay * p;
  const float b = momentum * momentum_buffer[i] + g;
  momentum_buffer[i] = b;
  p -= lr * b;
  master[i] = p;
  if (params_out) params_out[i] = from_float<T>(p);
}

// Block b sums a fixed interleaved share of the elements (8 at a time with 16-byte loads where possible),
// each thread in fp32 per vector and fp64 across vectors, then the block's warps in order. Each thread keeps
// four loads in flight (a one-wave grid with one 16-byte load per thread at a time does not cover the memory
// latency); the order of the additions is fixed by the indices alone.
template <typename T, int kVec>
__global__ void sum_of_squares_kernel(const T* x, int64_t n, double* partials) {
  constexpr int kInFlight = 4;
  auto squares = [&](int64_t i) {
    float part = 0.0f;
    if constexpr (kVec == 1) {
      const float v = to_float(x[i]);
      part = v * v;
    } else {
      const Vec16<T> packed = load16(x + i);
#pragma unroll
      for (int k = 0; k < kVec; ++k) part += to_float(packed.v[k]) * to_float(packed.v[k]);
    }
    return part;
  };
  double acc = 0.0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * kVec;
  int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  for (; i + (kInFlight - 1) * stride < n; i += kInFlight * stride) {
    float parts[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) parts[j] = squares(i + j * stride);
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) acc += parts[j];
  }
  for (; i < n; i += stride) acc += squares(i);
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  __shared__ double warps[kThreads / 32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) total += warps[w];
    partials[blockIdx.x] = total;
  }
}

// The sum of values[0..count) in fp64 by one block of kThreads, the same bits every run: thread i adds
// values i, i + kThreads, ... in order, then a fixed tree over the threads. Valid in thread 0.
template <typename T>
__device__ double block_sum_in_order(const T* values, int64_t count) {
  __shared__ double sums[kThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) acc += double(values[i]);
  sums[threadIdx.x] = acc;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) sums[threadIdx.x] += sums[threadIdx.x + width];
    __syncthreads();
  }
  return sums[0];
}

__global__ void sum_partials_kernel(const double* partials, int64_t count, double* result) {
  const double sum = block_sum_in_order(partials, count);
  if (threadIdx.x == 0) *result = sum;
}

__global__ void accumulate_sum_kernel(const float* values, int64_t n, double scale, double* total) {
  const double sum = block_sum_in_order(values, n);
  if (threadIdx.x == 0) *total += scale * sum;
}

__global__ void clip_factor_kernel(const double* sum_of_squares, const double* loss, float max_norm, float loss_scale,
                                   float* factor) {
  *factor = zb::clip_factor(*sum_of_squares, *loss, max_norm, loss_scale);
}

}  // namespace

void accumulate_sum(const float* values, int64_t n, double scale, double* total, cudaStream_t stream) {
  accumulate_sum_kernel<<<1, kThreads, 0, stream>>>(values, n, scale, total);
  ZB_CUDA_CHECK_LAUNCH();
}

void clip_factor(const double* sum_of_squares, const double* loss, float max_norm, float loss_scale, float* factor,
                 cudaStream_t stream) {
  clip_factor_kernel<<<1, 1, 0, stream>>>(sum_of_squares, loss, max_norm, loss_scale, factor);
  ZB_CUDA_CHECK_LAUNCH();
}

template <typename T>
void optimizer_step(float* master, const T* grad, float* m, float* v, T* params_out, int64_t n,
                    const OptimizerParams& p, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = blocks_for(n, kThreads);
  if (p.kind == OptimizerKind::sgd) {
    sgd_kernel<<<blocks, kThreads, 0, stream>>>(master, grad, m, params_out, n, p.lr, p.momentum, p.weight_decay,
                                                p.grad_scale, p.grad_factor);
  } else {
    // In double, as torch computes them: 1 - 0.999f in float is already 1.3e-5 relative off.
    const float bias1 = float(1.0 - std::pow(double(p.beta1), double(p.step)));
    const float bias2 = float(1.0 - std::pow(double(p.beta2), double(p.step)));
    const AdamStep step{{p.lr, p.weight_decay, p.beta1, p.beta2, p.eps, bias1, bias2, p.kind == OptimizerKind::adamw},
                        p.grad_scale, p.grad_factor};
    // The first n - n % 4 elements four at a time where every array allows it, the rest one at a time.
    const auto aligned = [](const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; };
    const int64_t quads =
        aligned(master, 16) && aligned(m, 16) && aligned(v, 16) && aligned(grad, sizeof(Four<T>)) &&
                (params_out == nullptr || aligned(params_out, sizeof(Four<T>)))
            ? n / 4
            : 0;
    if (quads > 0) {
      adam4_kernel<T><<<blocks_for(quads, kThreads), kThreads, 0, stream>>>(
          reinterpret_cast<float4*>(master), reinterpret_cast<const Four<T>*>(grad), reinterpret_cast<float4*>(m),
          reinterpret_cast<float4*>(v), reinterpret_cast<Four<T>*>(params_out), quads, step);
      ZB_CUDA_CHECK_LAUNCH();
    }
    const int64_t done = quads * 4;
    if (done < n) {
      adam_kernel<<<blocks_for(n - done, kThreads), kThreads, 0, stream>>>(
          master + done, grad + done, m + done, v + done, params_out ? params_out + done : nullptr, n - done, step);
    }
  }
  ZB_CUDA_CHECK_LAUNCH();
}

template <typename T>
void sum_of_squares_partials(const T* x, int64_t n, double* partials, cudaStream_t stream) {
  constexpr int kVec = Vec16<T>::kSize;
  if (vectorizable<T>(n, x)) {
    sum_of_squares_kernel<T, kVec><<<kSquarePartialsPerTensor, kThreads, 0, stream>>>(x, n, partials);
  } else {
    sum_of_squares_kernel<T, 1><<<kSquarePartialsPerTensor, kThreads, 0, stream>>>(x, n, partials);
  }
  ZB_CUDA_CHECK_LAUNCH();
}

void sum_partials(const double* partials, int64_t count, double* result, cudaStream_t stream) {
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(partials, count, result);
  ZB_CUDA_CHECK_LAUNCH();
}

#define ZB_INSTANTIATE(T)                                                                                   \
  template void optimizer_step<T>(float*, const T*, float*, float*, T*, int64_t, const OptimizerParams&,    \
                                  cudaStream_t);                                                          \
  template void sum_of_squares_partials<T>(const T*, int64_t, double*, cudaStream_t);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(bf16)
ZB_INSTANTIATE(f16)

}  // namespace zb::cuda
