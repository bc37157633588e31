// Argument checks shared by every backend: each function validates one op's tensors (device, dtype, shape)
// exactly as backend.h's contract states and returns the sizes the kernels need. A mismatch throws zb::Error
// naming the argument, what it is, and what was expected.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/attention_shape.h"

namespace zb::checks {

// The last axis is C; everything before it counts as rows.
struct Rows {
  int64_t n, c;
};

Rows embedding(const Tensor& ids, const Tensor& table, const Tensor& out, Device device);
Rows layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out, const Tensor& mean,
               const Tensor& rstd, Device device);
Rows rmsnorm(const Tensor& x, const Tensor& weight, const Tensor& out, const Tensor& rstd, Device device);
// Returns n, k, m of out[n, m] = inp[n, k] weight[m, k]^T; bias may be empty.
struct MatmulDims {
  int64_t n, k, m;
};
MatmulDims matmul(const Tensor& inp, const Tensor& weight, const Tensor& bias, const Tensor& out, Device device);
// A linear layer's weight gradient: of the weight's shape, or empty (a frozen weight: not computed).
void weight_gradient(const Tensor& weight, const Tensor& dweight, Device device);
// Returns rows, inner, cols of out[rows, cols] (+)= op(a) op(b) (Backend::gemm).
struct GemmDims {
  int64_t rows, inner, cols;
};
GemmDims gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& out, Device device);
void attention(const Tensor& qkv, const AttentionShape& shape, const Tensor& out, const Tensor& lse, Device device);
void rope(const Tensor& qkv, const Tensor& inv_freq, const AttentionShape& shape, Device device);
int64_t same_shape(const Tensor& a, const Tensor& b, const char* what, Device device);  // returns numel
Rows swiglu(const Tensor& inp, const Tensor& out, Device device);                      // returns n, f
Rows geglu(const Tensor& inp, const Tensor& out, Device device);                       // returns n, f
// Backend::qk_norm_backward's input gradient: qkv_in's shape, and another tensor than dout (the gains' gradients
// read dout after dqkv_in is written).
void qk_norm_input_gradient(const Tensor& dout, const Tensor& qkv_in, const Tensor& dqkv_in, Device device);
// Backend::qk_norm_forward's tensors (qkv_out also stands for the backward's dout and dqkv_in).
void qk_norm(const Tensor& qkv_in, const Tensor& q_weight, const Tensor& k_weight, const Tensor& qkv_out,
             const Tensor& rstd, const AttentionShape& shape, Device device);
// A per-head norm's weight gradient: of the weight's shape, or empty (a frozen weight: not computed).
void norm_weight_gradient(const Tensor& weight, const Tensor& dweight, Device device);
Rows cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab, const Tensor& losses, Device device);
void optimizer(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& params_out,
               bool needs_v, Device device);

void on_device(const Tensor& t, Device device, const char* what);
void expect(const Tensor& t, const char* what, Shape shape, DType dtype, Device device);

}  // namespace zb::checks
