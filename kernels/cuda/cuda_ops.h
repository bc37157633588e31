// The CUDA kernels' launchers, on raw device pointers, all asynchronous on `stream`.
// T is float (fp32 mode), __nv_bfloat16 or __half; statistics (mean, rstd, lse, losses) and optimizer state are fp32.
// CudaBackend (cuda_backend.h) checks the tensors and calls these.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/adam_8bit.h"
#include "kernels/attention_shape.h"
#include "kernels/backend_options.h"
#include "kernels/optimizer_params.h"

namespace zb::cuda {

// Device scratch memory handed to a launcher that needs temporary space (stream-ordered reuse).
struct Scratch {
  void* data = nullptr;
  size_t bytes = 0;
};

template <typename S, typename D>
void convert(const S* src, D* dst, int64_t n, cudaStream_t stream);
// out[i] = std * random_normal(seed, random_stream, first + i) (core/random.h), rounded to T.
template <typename T>
void fill_normal(T* out, int64_t n, uint64_t seed, uint64_t random_stream, int64_t first, double std,
                 cudaStream_t stream);
template <typename T>
void fill_value(T* out, int64_t n, float value, cudaStream_t stream);

template <typename T>
void embedding_forward(const int32_t* ids, const T* table, T* out, int64_t n, int64_t c, bool accumulate,
                       cudaStream_t stream);
// Bytes of scratch embedding_backward needs for n ids.
size_t embedding_backward_scratch(int64_t n);
template <typename T>
void embedding_backward(const int32_t* ids, const T* dout, T* dtable, int64_t n, int64_t c, int64_t vocab,
                        Scratch scratch, cudaStream_t stream);

// Bytes of scratch the column reductions (norm parameter gradients, bias gradients) need.
size_t column_reduce_scratch(int64_t n, int64_t c);
template <typename T>
void layernorm_forward(const T* x, const T* weight, const T* bias, float eps, T* out, float* mean, float* rstd,
                       int64_t n, int64_t c, NormRows rows, cudaStream_t stream);
template <typename T>
void layernorm_backward(const T* dout, const T* x, const T* weight, const float* mean, const float* rstd, T* dx,
                        T* dweight, T* dbias, int64_t n, int64_t c, bool accumulate, NormRows rows, Scratch scratch,
                        cudaStream_t stream);
// The RMSNorms' gain is gain_offset + weight, formed in fp32 (Backend::rmsnorm_forward).
template <typename T>
void rmsnorm_forward(const T* x, const T* weight, float gain_offset, float eps, T* out, float* rstd, int64_t n,
                     int64_t c, NormRows rows, cudaStream_t stream);
// residual = a + b (rounded to T), then the norm of residual: one kernel, the sum never re-read from DRAM.
template <typename T>
void residual_layernorm_forward(const T* a, const T* b, T* residual, const T* weight, const T* bias, float eps, T* out,
                                float* mean, float* rstd, int64_t n, int64_t c, NormRows rows, cudaStream_t stream);
template <typename T>
void residual_rmsnorm_forward(const T* a, const T* b, T* residual, const T* weight, float gain_offset, float eps,
                              T* out, float* rstd, int64_t n, int64_t c, NormRows rows, cudaStream_t stream);
template <typename T>
void rmsnorm_backward(const T* dout, const T* x, const T* weight, float gain_offset, const float* rstd, T* dx,
                      T* dweight, int64_t n, int64_t c, bool accumulate, NormRows rows, Scratch scratch,
                      cudaStream_t stream);
// Backend::qk_norm_forward and qk_norm_backward. The backward's weight gradients (skipped where null) go through
// the column reduction: qk_norm_backward_scratch bytes of scratch.
template <typename T>
void qk_norm_forward(const T* qkv_in, const T* q_weight, const T* k_weight, float eps, float gain_offset,
                     const AttentionShape& shape, T* qkv_out, float* rstd, cudaStream_t stream);
size_t qk_norm_backward_scratch(const AttentionShape& shape);
template <typename T>
void qk_norm_backward(const T* dout, const T* qkv_in, const T* q_weight, const T* k_weight, const float* rstd,
                      float gain_offset, const AttentionShape& shape, T* dqkv_in, T* dq_weight, T* dk_weight,
                      bool accumulate, Scratch scratch, cudaStream_t stream);
// dbias[j] += sum over rows of dout[row, j] (= when not accumulating).
template <typename T>
void bias_backward(const T* dout, T* dbias, int64_t n, int64_t c, bool accumulate, Scratch scratch,
                   cudaStream_t stream);

template <typename T>
void attention_forward(const T* qkv, const AttentionShape& shape, T* out, float* lse, cudaStream_t stream);
// Bytes of scratch attention_backward needs (the per-row dot(dout, out)).
size_t attention_backward_scratch(const AttentionShape& shape);
template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* out, const float* lse, const AttentionShape& shape,
                        T* dqkv, Scratch scratch, cudaStream_t stream);
// Grouped-query attention's key (or value) gradient from per-query-head ones: dst[t, g, :] = the sum over the
// query heads h of group g of full[t, h, :], for full [tokens, heads * head_dim] and dst the key (value) heads
// of a dqkv [tokens, qkv_width]. T is one of the 16-bit types.
template <typename T>
void sum_head_groups(const T* full, const AttentionShape& shape, T* dst, cudaStream_t stream);
// Adam or AdamW with 8-bit moments (kernels/adam_8bit.h, which this follows up to fused multiply-adds): master
// and grad of n elements, the moments' codes and scales in `moments` (device pointers), the new weights into
// params_out when it is not null. params.grad_factor, where set, is read on the device (a non-finite one skips).
template <typename T>
void adam_8bit_step(float* master, const T* grad, const QuantizedMoments& moments, T* params_out, int64_t n,
                    const OptimizerParams& params, cudaStream_t stream);
template <typename T>
void rope_rotate(T* qkv, const float* inv_freq, const AttentionShape& shape, int direction, cudaStream_t stream);

template <typename T>
void gelu_forward(const T* inp, T* out, int64_t n, cudaStream_t stream);
template <typename T>
void gelu_backward(const T* dout, const T* inp, T* dinp, int64_t n, cudaStream_t stream);
template <typename T>
void relu_forward(const T* inp, T* out, int64_t n, cudaStream_t stream);
template <typename T>
void relu_backward(const T* dout, const T* inp, T* dinp, int64_t n, cudaStream_t stream);
template <typename T>
void swiglu_forward(const T* inp, T* out, int64_t n, int64_t f, cudaStream_t stream);
template <typename T>
void swiglu_backward(const T* dout, const T* inp, T* dinp, int64_t n, int64_t f, cudaStream_t stream);
template <typename T>
void geglu_forward(const T* inp, T* out, int64_t n, int64_t f, cudaStream_t stream);
template <typename T>
void geglu_backward(const T* dout, const T* inp, T* dinp, int64_t n, int64_t f, cudaStream_t stream);
template <typename T>
void residual_forward(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream);
// out[i] = x[i] * factor in fp32, rounded to T (out may be x).
template <typename T>
void scale(const T* x, float factor, T* out, int64_t n, cudaStream_t stream);
template <typename T>
void dropout_mask(const T* x, double p, uint64_t seed, uint64_t stream_id, T* out, int64_t n, cudaStream_t stream);

// dlogits may alias logits (then the gradient overwrites them); nullptr: losses only.
template <typename T>
void cross_entropy(const T* logits, const int32_t* targets, int64_t n, int64_t padded_vocab, int64_t vocab,
                   float* losses, T* dlogits, float grad_scale, cudaStream_t stream);

// Adds each tensor's sum of squares into partials[slot...]: call sum_of_squares_partials per tensor with
// increasing first_slot, then sum_partials over all slots.
constexpr int kSquarePartialsPerTensor = 1024;
template <typename T>
void sum_of_squares_partials(const T* x, int64_t n, double* partials, cudaStream_t stream);
void sum_partials(const double* partials, int64_t count, double* result, cudaStream_t stream);
// *total += scale * (values[0] + ... + values[n-1]), in a fixed order.
void accumulate_sum(const float* values, int64_t n, double scale, double* total, cudaStream_t stream);
// *factor = zb::clip_factor(*sum_of_squares, *loss, max_norm, loss_scale) (kernels/clip_factor.h).
void clip_factor(const double* sum_of_squares, const double* loss, float max_norm, float loss_scale, float* factor,
                 cudaStream_t stream);

template <typename T>
void optimizer_step(float* master, const T* grad, float* m, float* v, T* params_out, int64_t n,
                    const OptimizerParams& params, cudaStream_t stream);

}  // namespace zb::cuda
