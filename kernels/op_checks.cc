#include "kernels/op_checks.h"

#include <cmath>

#include "kernels/backend.h"

namespace zb::checks {

void on_device(const Tensor& t, Device device, const char* what) {
  ZB_CHECK(t.device == device, what, " is on ", t.device.to_string(), ", the backend works on ", device.to_string());
  ZB_CHECK(t.data != nullptr || t.numel() == 0, what, " has no memory");
}

void expect(const Tensor& t, const char* what, Shape shape, DType dtype, Device device) {
  on_device(t, device, what);
  ZB_CHECK(t.shape == shape && t.dtype == dtype, what, " is ", t.describe(), ", expected ", dtype_name(dtype),
           shape.to_string());
}

namespace {

Rows rows_of(const Tensor& t) {
  ZB_CHECK(t.shape.rank() >= 1, "a scalar has no rows");
  const int64_t c = t.shape[t.shape.rank() - 1];
  return {c ? t.numel() / c : 0, c};
}

}  // namespace

Rows embedding(const Tensor& ids, const Tensor& table, const Tensor& out, Device device) {
  const Rows table_rows = rows_of(table);
  expect(ids, "ids", Shape{ids.numel()}, DType::i32, device);
  expect(table, "embedding table", table.shape, table.dtype, device);
  expect(out, "embedding rows", Shape{ids.numel(), table_rows.c}, table.dtype, device);
  return table_rows;  // vocabulary rows, width
}

Rows layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out, const Tensor& mean,
               const Tensor& rstd, Device device) {
  const Rows r = rmsnorm(x, weight, out, rstd, device);
  expect(bias, "layernorm bias", Shape{r.c}, x.dtype, device);
  expect(mean, "layernorm mean", Shape{r.n}, stats_dtype(x.dtype), device);
  return r;
}

Rows rmsnorm(const Tensor& x, const Tensor& weight, const Tensor& out, const Tensor& rstd, Device device) {
  const Rows r = rows_of(x);
  expect(x, "norm input", x.shape, x.dtype, device);
  expect(weight, "norm weight", Shape{r.c}, x.dtype, device);
  expect(out, "norm output", x.shape, x.dtype, device);
  expect(rstd, "norm rstd", Shape{r.n}, stats_dtype(x.dtype), device);
  return r;
}

MatmulDims matmul(const Tensor& inp, const Tensor& weight, const Tensor& bias, const Tensor& out, Device device) {
  const Rows in = rows_of(inp), w = rows_of(weight);
  ZB_CHECK(w.c == in.c, "matmul: input ", inp.describe(), " against weight ", weight.describe());
  expect(inp, "matmul input", inp.shape, inp.dtype, device);
  expect(weight, "matmul weight", Shape{w.n, in.c}, inp.dtype, device);
  if (!bias.empty()) expect(bias, "matmul bias", Shape{w.n}, inp.dtype, device);
  expect(out, "matmul output", Shape{in.n, w.n}, inp.dtype, device);
  return {in.n, in.c, w.n};
}

void weight_gradient(const Tensor& weight, const Tensor& dweight, Device device) {
  if (!dweight.empty()) same_shape(weight, dweight, "matmul dweight", device);
}

GemmDims gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& out, Device device) {
  ZB_CHECK(a.shape.rank() == 2 && b.shape.rank() == 2 && out.shape.rank() == 2, "gemm operands ", a.describe(), ", ",
           b.describe(), " and ", out.describe(), " must be matrices");
  const int64_t rows = transpose_a ? a.shape[1] : a.shape[0], inner = transpose_a ? a.shape[0] : a.shape[1];
  const int64_t b_inner = transpose_b ? b.shape[1] : b.shape[0], cols = transpose_b ? b.shape[0] : b.shape[1];
  ZB_CHECK(inner == b_inner, "gemm inner sizes differ: ", a.describe(), transpose_a ? " (transposed)" : "", " and ",
           b.describe(), transpose_b ? " (transposed)" : "");
  expect(a, "gemm a", a.shape, a.dtype, device);
  expect(b, "gemm b", b.shape, a.dtype, device);
  expect(out, "gemm out", Shape{rows, cols}, a.dtype, device);
  return {rows, inner, cols};
}

void attention(const Tensor& qkv, const AttentionShape& s, const Tensor& out, const Tensor& lse, Device device) {
  ZB_CHECK(s.kv_heads > 0 && s.heads % s.kv_heads == 0, "heads ", s.heads, " not a multiple of kv_heads ", s.kv_heads);
  ZB_CHECK(std::isfinite(s.softmax_scale) && s.softmax_scale >= 0, "attention softmax scale ", s.softmax_scale,
           " (0 is 1/sqrt(head_dim))");
  expect(qkv, "qkv", Shape{s.tokens(), s.qkv_width()}, qkv.dtype, device);
  expect(out, "attention output", Shape{s.tokens(), s.q_width()}, qkv.dtype, device);
  expect(lse, "attention lse", Shape{s.batch, s.heads, s.seq}, stats_dtype(qkv.dtype), device);
}

void rope(const Tensor& qkv, const Tensor& inv_freq, const AttentionShape& s, Device device) {
  ZB_CHECK(s.kv_heads > 0 && s.heads % s.kv_heads == 0, "heads ", s.heads, " not a multiple of kv_heads ", s.kv_heads);
  expect(qkv, "qkv", Shape{s.tokens(), s.qkv_width()}, qkv.dtype, device);
  expect(inv_freq, "rope inv_freq", Shape{s.head_dim / 2}, stats_dtype(qkv.dtype), device);
}

int64_t same_shape(const Tensor& a, const Tensor& b, const char* what, Device device) {
  expect(a, what, a.shape, a.dtype, device);
  expect(b, what, a.shape, a.dtype, device);
  return a.numel();
}

namespace {

// A gated unit's input [N, 2F] (gate, then up) and output [N, F].
Rows gated(const Tensor& inp, const Tensor& out, const char* input_name, const char* output_name, Device device) {
  const Rows r = rows_of(inp);
  ZB_CHECK(r.c % 2 == 0, input_name, " ", inp.describe(), " must hold gate and up halves");
  expect(inp, input_name, inp.shape, inp.dtype, device);
  expect(out, output_name, Shape{r.n, r.c / 2}, inp.dtype, device);
  return {r.n, r.c / 2};
}

}  // namespace

Rows swiglu(const Tensor& inp, const Tensor& out, Device device) {
  return gated(inp, out, "swiglu input", "swiglu output", device);
}

Rows geglu(const Tensor& inp, const Tensor& out, Device device) {
  return gated(inp, out, "geglu input", "geglu output", device);
}

void qk_norm_input_gradient(const Tensor& dout, const Tensor& qkv_in, const Tensor& dqkv_in, Device device) {
  same_shape(qkv_in, dqkv_in, "qk_norm dqkv", device);
  ZB_CHECK(dqkv_in.data != dout.data || dout.numel() == 0, "qk_norm's backward writes another tensor than dout");
}

void qk_norm(const Tensor& qkv_in, const Tensor& q_weight, const Tensor& k_weight, const Tensor& qkv_out,
             const Tensor& rstd, const AttentionShape& s, Device device) {
  ZB_CHECK(s.kv_heads > 0 && s.heads % s.kv_heads == 0, "heads ", s.heads, " not a multiple of kv_heads ", s.kv_heads);
  const Shape qkv{s.tokens(), s.qkv_width()};
  expect(qkv_in, "qk_norm input", qkv, qkv_in.dtype, device);
  expect(q_weight, "q_norm weight", Shape{s.head_dim}, qkv_in.dtype, device);
  expect(k_weight, "k_norm weight", Shape{s.head_dim}, qkv_in.dtype, device);
  expect(qkv_out, "qk_norm output", qkv, qkv_in.dtype, device);
  expect(rstd, "qk_norm rstd", Shape{s.tokens(), s.heads + s.kv_heads}, stats_dtype(qkv_in.dtype), device);
  ZB_CHECK(qkv_in.data != qkv_out.data || qkv.numel() == 0, "qk_norm writes another tensor than it reads");
}

void norm_weight_gradient(const Tensor& weight, const Tensor& dweight, Device device) {
  if (!dweight.empty()) same_shape(weight, dweight, "norm dweight", device);
}

Rows cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab, const Tensor& losses, Device device) {
  const Rows r = rows_of(logits);
  ZB_CHECK(0 < vocab && vocab <= r.c, "vocab ", vocab, " against logits ", logits.describe());
  expect(logits, "logits", logits.shape, logits.dtype, device);
  expect(targets, "targets", Shape{r.n}, DType::i32, device);
  expect(losses, "losses", Shape{r.n}, stats_dtype(logits.dtype), device);
  return r;
}

void optimizer(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& params_out,
               bool needs_v, Device device) {
  const Shape flat{master.numel()};
  expect(master, "master weights", flat, master.dtype, device);
  expect(grad, "gradient", flat, grad.dtype, device);
  expect(m, "first moment", flat, master.dtype, device);
  if (needs_v) expect(v, "second moment", flat, master.dtype, device);
  if (!params_out.empty()) expect(params_out, "model weights", flat, params_out.dtype, device);
}

}  // namespace zb::checks
