// The CPU reference kernels on raw pointers, templated on the element type: float for training and the
// oracle, double for the finite-difference tests. CpuBackend (cpu_backend.h) checks shapes and dtypes and
// calls these. Every loop is written to be obviously right first; OpenMP splits independent rows, and every
// reduction runs in a fixed order so that results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "kernels/attention_shape.h"
#include "kernels/adam_8bit.h"
#include "kernels/optimizer_params.h"

namespace zb::cpu {

template <typename T>
void embedding_forward(const int32_t* ids, const T* table, T* out, int64_t n, int64_t c, bool accumulate);
template <typename T>
void embedding_backward(const int32_t* ids, const T* dout, T* dtable, int64_t n, int64_t c);

template <typename T>
void layernorm_forward(const T* x, const T* weight, const T* bias, T eps, T* out, T* mean, T* rstd, int64_t n,
                       int64_t c);
template <typename T>
void layernorm_backward(const T* dout, const T* x, const T* weight, const T* mean, const T* rstd, T* dx, T* dweight,
                        T* dbias, int64_t n, int64_t c);
// The gain is gain_offset + weight (Backend::rmsnorm_forward).
template <typename T>
void rmsnorm_forward(const T* x, const T* weight, T gain_offset, T eps, T* out, T* rstd, int64_t n, int64_t c);
template <typename T>
void rmsnorm_backward(const T* dout, const T* x, const T* weight, T gain_offset, const T* rstd, T* dx, T* dweight,
                      int64_t n, int64_t c);
// Backend::qk_norm_forward and qk_norm_backward; dq_weight and dk_weight are added to, and skipped where null.
template <typename T>
void qk_norm_forward(const T* qkv_in, const T* q_weight, const T* k_weight, T eps, T gain_offset,
                     const AttentionShape& shape, T* qkv_out, T* rstd);
template <typename T>
void qk_norm_backward(const T* dout, const T* qkv_in, const T* q_weight, const T* k_weight, const T* rstd,
                      T gain_offset, const AttentionShape& shape, T* dqkv_in, T* dq_weight, T* dk_weight);

template <typename T>
void matmul_forward(const T* inp, const T* weight, const T* bias, T* out, int64_t n, int64_t k, int64_t m);
template <typename T>
void matmul_backward(const T* dout, const T* inp, const T* weight, T* dinp, T* dweight, T* dbias, int64_t n, int64_t k,
                     int64_t m);
// out[rows, cols] (+)= alpha op(a) op(b) (Backend::gemm); a and b row-major, transposed where asked.
template <typename T>
void gemm(const T* a, bool transpose_a, const T* b, bool transpose_b, T alpha, bool accumulate, T* out, int64_t rows,
          int64_t inner, int64_t cols);

template <typename T>
void attention_forward(const T* qkv, const AttentionShape& shape, T* out, T* lse);
template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* out, const T* lse, const AttentionShape& shape, T* dqkv);
// direction +1 rotates (forward), -1 rotates back (backward).
template <typename T>
void rope_rotate(T* qkv, const T* inv_freq, const AttentionShape& shape, int direction);

template <typename T>
void gelu_forward(const T* inp, T* out, int64_t n);
template <typename T>
void gelu_backward(const T* dout, const T* inp, T* dinp, int64_t n);
template <typename T>
void relu_forward(const T* inp, T* out, int64_t n);
template <typename T>
void relu_backward(const T* dout, const T* inp, T* dinp, int64_t n);
template <typename T>
void swiglu_forward(const T* inp, T* out, int64_t n, int64_t f);
template <typename T>
void swiglu_backward(const T* dout, const T* inp, T* dinp, int64_t n, int64_t f);
template <typename T>
void geglu_forward(const T* inp, T* out, int64_t n, int64_t f);
template <typename T>
void geglu_backward(const T* dout, const T* inp, T* dinp, int64_t n, int64_t f);
template <typename T>
void residual_forward(const T* a, const T* b, T* out, int64_t n);
template <typename T>
void scale(const T* x, T factor, T* out, int64_t n);
template <typename T>
void dropout_mask(const T* x, double p, uint64_t seed, uint64_t stream, T* out, int64_t n);

// dlogits == nullptr: losses only. Otherwise dlogits (which may alias logits) receives the gradient.
template <typename T>
void cross_entropy(const T* logits, const int32_t* targets, int64_t n, int64_t padded_vocab, int64_t vocab, T* losses,
                   T* dlogits, T grad_scale);

template <typename T>
double sum_of_squares(const T* x, int64_t n);
template <typename T>
void optimizer_step(T* master, const T* grad, T* m, T* v, int64_t n, const OptimizerParams& params);

// Adam or AdamW (params.kind) with 8-bit moments (kernels/adam_8bit.h): as optimizer_step<float> with each
// block's moments read from 8 bits before the update and stored in 8 bits after it.
void optimizer_step_8bit(float* master, const float* grad, QuantizedMoments moments, int64_t n,
                         const OptimizerParams& params);

}  // namespace zb::cpu
