#include "kernels/cpu/cpu_backend.h"

#include <cstring>
#include <initializer_list>

#include "kernels/cpu/cpu_ops.h"

namespace zb {

namespace {

using TensorList = std::initializer_list<const Tensor*>;

// Calls fn.template operator()<T>() with T = float or double, matching dtype.
template <typename Fn>
void dispatch_real(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn.template operator()<float>(); return;
    case DType::f64: fn.template operator()<double>(); return;
    default: ZB_CHECK(false, "the CPU backend computes in fp32 or fp64, not ", dtype_name(dtype));
  }
}

void expect_cpu(const Tensor& t, const char* what) {
  ZB_CHECK(t.device.is_cpu(), what, " is on ", t.device.to_string(), ", the CPU backend needs host memory");
  ZB_CHECK(t.data != nullptr || t.numel() == 0, what, " has no memory");
}

void expect(const Tensor& t, const char* what, Shape shape, DType dtype) {
  expect_cpu(t, what);
  ZB_CHECK(t.shape.numel() == shape.numel() && t.dtype == dtype, what, " is ", t.describe(), ", expected ",
           dtype_name(dtype), shape.to_string());
}

// Rows and columns of a [N, C] tensor (any rank: the last axis is C).
struct Rows {
  int64_t n, c;
};
Rows rows_of(const Tensor& t) {
  ZB_CHECK(t.shape.rank() >= 1, "a scalar has no rows");
  const int64_t c = t.shape[t.shape.rank() - 1];
  return {c ? t.numel() / c : 0, c};
}

void expect_ids(const Tensor& ids, int64_t n, const char* what) { expect(ids, what, Shape{n}, DType::i32); }

void expect_ids_below(const Tensor& ids, int64_t bound, const char* what) {
  const int32_t* p = ids.as<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    ZB_CHECK(p[i] >= 0 && p[i] < bound, what, "[", i, "] = ", p[i], " is outside [0, ", bound, ")");
}

void expect_attention(const Tensor& qkv, const AttentionShape& s) {
  ZB_CHECK(s.kv_heads > 0 && s.heads % s.kv_heads == 0, "heads ", s.heads, " not a multiple of kv_heads ", s.kv_heads);
  expect(qkv, "qkv", Shape{s.tokens(), s.qkv_width()}, qkv.dtype);
}

}  // namespace

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  expect_cpu(src, "copy source");
  expect_cpu(dst, "copy destination");
  ZB_CHECK(src.bytes() == dst.bytes(), "copy of ", src.describe(), " into ", dst.describe());
  if (src.bytes()) std::memmove(dst.data, src.data, src.bytes());
}

void CpuBackend::fill_zero(Tensor& t) {
  expect_cpu(t, "fill_zero target");
  if (t.bytes()) std::memset(t.data, 0, t.bytes());
}

void CpuBackend::embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, bool accumulate) {
  const auto [v, c] = rows_of(table);
  expect_ids(ids, ids.numel(), "ids");
  expect(out, "embedding out", Shape{ids.numel(), c}, table.dtype);
  expect_ids_below(ids, v, "ids");
  dispatch_real(table.dtype, [&]<typename T>() {
    cpu::embedding_forward<T>(ids.as<int32_t>(), table.as<T>(), out.as<T>(), ids.numel(), c, accumulate);
  });
}

void CpuBackend::embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dtable) {
  const auto [v, c] = rows_of(dtable);
  expect(dout, "embedding dout", Shape{ids.numel(), c}, dtable.dtype);
  expect_ids_below(ids, v, "ids");
  dispatch_real(dtable.dtype, [&]<typename T>() {
    cpu::embedding_backward<T>(ids.as<int32_t>(), dout.as<T>(), dtable.as<T>(), ids.numel(), c);
  });
}

void CpuBackend::layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                                   Tensor& mean, Tensor& rstd) {
  const auto [n, c] = rows_of(x);
  for (const Tensor* t : TensorList{&weight, &bias}) expect(*t, "layernorm parameter", Shape{c}, x.dtype);
  expect(out, "layernorm out", x.shape, x.dtype);
  expect(mean, "layernorm mean", Shape{n}, stats_dtype(x.dtype));
  expect(rstd, "layernorm rstd", Shape{n}, stats_dtype(x.dtype));
  dispatch_real(x.dtype, [&]<typename T>() {
    cpu::layernorm_forward<T>(x.as<T>(), weight.as<T>(), bias.as<T>(), T(eps), out.as<T>(), mean.as<T>(), rstd.as<T>(),
                              n, c);
  });
}

void CpuBackend::layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                    const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  const auto [n, c] = rows_of(x);
  for (const Tensor* t : TensorList{&dout, &dx}) expect(*t, "layernorm gradient", x.shape, x.dtype);
  for (const Tensor* t : TensorList{&weight, &dweight, &dbias}) expect(*t, "layernorm parameter", Shape{c}, x.dtype);
  for (const Tensor* t : TensorList{&mean, &rstd}) expect(*t, "layernorm statistics", Shape{n}, stats_dtype(x.dtype));
  dispatch_real(x.dtype, [&]<typename T>() {
    cpu::layernorm_backward<T>(dout.as<T>(), x.as<T>(), weight.as<T>(), mean.as<T>(), rstd.as<T>(), dx.as<T>(),
                               dweight.as<T>(), dbias.as<T>(), n, c);
  });
}

void CpuBackend::rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& out, Tensor& rstd) {
  const auto [n, c] = rows_of(x);
  expect(weight, "rmsnorm weight", Shape{c}, x.dtype);
  expect(out, "rmsnorm out", x.shape, x.dtype);
  expect(rstd, "rmsnorm rstd", Shape{n}, stats_dtype(x.dtype));
  dispatch_real(x.dtype, [&]<typename T>() {
    cpu::rmsnorm_forward<T>(x.as<T>(), weight.as<T>(), T(eps), out.as<T>(), rstd.as<T>(), n, c);
  });
}

void CpuBackend::rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                  Tensor& dx, Tensor& dweight) {
  const auto [n, c] = rows_of(x);
  for (const Tensor* t : TensorList{&dout, &dx}) expect(*t, "rmsnorm gradient", x.shape, x.dtype);
  for (const Tensor* t : TensorList{&weight, &dweight}) expect(*t, "rmsnorm parameter", Shape{c}, x.dtype);
  expect(rstd, "rmsnorm rstd", Shape{n}, stats_dtype(x.dtype));
  dispatch_real(x.dtype, [&]<typename T>() {
    cpu::rmsnorm_backward<T>(dout.as<T>(), x.as<T>(), weight.as<T>(), rstd.as<T>(), dx.as<T>(), dweight.as<T>(), n, c);
  });
}

void CpuBackend::matmul_forward(const Tensor& inp, const Tensor& weight, const Tensor& bias, Tensor& out) {
  const auto [n, k] = rows_of(inp);
  const auto [m, weight_k] = rows_of(weight);
  ZB_CHECK(weight_k == k, "matmul: input ", inp.describe(), " against weight ", weight.describe());
  expect(weight, "matmul weight", Shape{m, k}, inp.dtype);
  if (!bias.empty()) expect(bias, "matmul bias", Shape{m}, inp.dtype);
  expect(out, "matmul out", Shape{n, m}, inp.dtype);
  dispatch_real(inp.dtype, [&]<typename T>() {
    cpu::matmul_forward<T>(inp.as<T>(), weight.as<T>(), bias.empty() ? nullptr : bias.as<T>(), out.as<T>(), n, k, m);
  });
}

void CpuBackend::matmul_backward(const Tensor& dout, const Tensor& inp, const Tensor& weight, Tensor& dinp,
                                 Tensor& dweight, Tensor& dbias) {
  const auto [n, k] = rows_of(inp);
  const auto [m, weight_k] = rows_of(weight);
  ZB_CHECK(weight_k == k, "matmul: input ", inp.describe(), " against weight ", weight.describe());
  expect(dout, "matmul dout", Shape{n, m}, inp.dtype);
  expect(dinp, "matmul dinp", Shape{n, k}, inp.dtype);
  expect(dweight, "matmul dweight", Shape{m, k}, inp.dtype);
  if (!dbias.empty()) expect(dbias, "matmul dbias", Shape{m}, inp.dtype);
  dispatch_real(inp.dtype, [&]<typename T>() {
    cpu::matmul_backward<T>(dout.as<T>(), inp.as<T>(), weight.as<T>(), dinp.as<T>(), dweight.as<T>(),
                            dbias.empty() ? nullptr : dbias.as<T>(), n, k, m);
  });
}

void CpuBackend::attention_forward(const Tensor& qkv, const AttentionShape& s, Tensor& out, Tensor& lse) {
  expect_attention(qkv, s);
  expect(out, "attention out", Shape{s.tokens(), s.q_width()}, qkv.dtype);
  expect(lse, "attention lse", Shape{s.batch, s.heads, s.seq}, stats_dtype(qkv.dtype));
  dispatch_real(qkv.dtype, [&]<typename T>() { cpu::attention_forward<T>(qkv.as<T>(), s, out.as<T>(), lse.as<T>()); });
}

void CpuBackend::attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                    const AttentionShape& s, Tensor& dqkv) {
  expect_attention(qkv, s);
  for (const Tensor* t : TensorList{&dout, &out}) expect(*t, "attention output", Shape{s.tokens(), s.q_width()}, qkv.dtype);
  expect(lse, "attention lse", Shape{s.batch, s.heads, s.seq}, stats_dtype(qkv.dtype));
  expect(dqkv, "attention dqkv", qkv.shape, qkv.dtype);
  dispatch_real(qkv.dtype, [&]<typename T>() {
    cpu::attention_backward<T>(dout.as<T>(), qkv.as<T>(), out.as<T>(), lse.as<T>(), s, dqkv.as<T>());
  });
}

void CpuBackend::rope_forward(Tensor& qkv, const Tensor& inv_freq, const AttentionShape& s) {
  expect_attention(qkv, s);
  expect(inv_freq, "rope inv_freq", Shape{s.head_dim / 2}, stats_dtype(qkv.dtype));
  dispatch_real(qkv.dtype, [&]<typename T>() { cpu::rope_rotate<T>(qkv.as<T>(), inv_freq.as<T>(), s, +1); });
}

void CpuBackend::rope_backward(Tensor& dqkv, const Tensor& inv_freq, const AttentionShape& s) {
  expect_attention(dqkv, s);
  expect(inv_freq, "rope inv_freq", Shape{s.head_dim / 2}, stats_dtype(dqkv.dtype));
  dispatch_real(dqkv.dtype, [&]<typename T>() { cpu::rope_rotate<T>(dqkv.as<T>(), inv_freq.as<T>(), s, -1); });
}

namespace {

// An elementwise op: fn(dout-or-null, inp, out, n).
template <typename Op>
void elementwise(const Tensor& inp, Tensor& out, Op op) {
  expect(out, "elementwise out", inp.shape, inp.dtype);
  dispatch_real(inp.dtype, [&]<typename T>() { op(inp.as<T>(), out.as<T>(), inp.numel()); });
}

}  // namespace

void CpuBackend::gelu_forward(const Tensor& inp, Tensor& out) {
  elementwise(inp, out, []<typename T>(const T* x, T* y, int64_t n) { cpu::gelu_forward<T>(x, y, n); });
}

void CpuBackend::gelu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  expect(dout, "gelu dout", inp.shape, inp.dtype);
  elementwise(inp, dinp, [&]<typename T>(const T* x, T* dx, int64_t n) { cpu::gelu_backward<T>(dout.as<T>(), x, dx, n); });
}

void CpuBackend::relu_forward(const Tensor& inp, Tensor& out) {
  elementwise(inp, out, []<typename T>(const T* x, T* y, int64_t n) { cpu::relu_forward<T>(x, y, n); });
}

void CpuBackend::relu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  expect(dout, "relu dout", inp.shape, inp.dtype);
  elementwise(inp, dinp, [&]<typename T>(const T* x, T* dx, int64_t n) { cpu::relu_backward<T>(dout.as<T>(), x, dx, n); });
}

void CpuBackend::swiglu_forward(const Tensor& inp, Tensor& out) {
  const auto [n, two_f] = rows_of(inp);
  ZB_CHECK(two_f % 2 == 0, "swiglu input ", inp.describe(), " must hold gate and up halves");
  expect(out, "swiglu out", Shape{n, two_f / 2}, inp.dtype);
  dispatch_real(inp.dtype, [&]<typename T>() { cpu::swiglu_forward<T>(inp.as<T>(), out.as<T>(), n, two_f / 2); });
}

void CpuBackend::swiglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  const auto [n, two_f] = rows_of(inp);
  ZB_CHECK(two_f % 2 == 0, "swiglu input ", inp.describe(), " must hold gate and up halves");
  expect(dout, "swiglu dout", Shape{n, two_f / 2}, inp.dtype);
  expect(dinp, "swiglu dinp", inp.shape, inp.dtype);
  dispatch_real(inp.dtype, [&]<typename T>() {
    cpu::swiglu_backward<T>(dout.as<T>(), inp.as<T>(), dinp.as<T>(), n, two_f / 2);
  });
}

void CpuBackend::residual_forward(const Tensor& a, const Tensor& b, Tensor& out) {
  expect(b, "residual input", a.shape, a.dtype);
  expect(out, "residual out", a.shape, a.dtype);
  dispatch_real(a.dtype, [&]<typename T>() { cpu::residual_forward<T>(a.as<T>(), b.as<T>(), out.as<T>(), a.numel()); });
}

namespace {

void run_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab, Tensor& losses, Tensor* dlogits,
                       float grad_scale) {
  const auto [n, padded_vocab] = rows_of(logits);
  ZB_CHECK(0 < vocab && vocab <= padded_vocab, "vocab ", vocab, " against logits ", logits.describe());
  expect_ids(targets, n, "targets");
  expect_ids_below(targets, vocab, "targets");
  expect(losses, "losses", Shape{n}, stats_dtype(logits.dtype));
  dispatch_real(logits.dtype, [&]<typename T>() {
    cpu::cross_entropy<T>(logits.as<T>(), targets.as<int32_t>(), n, padded_vocab, vocab, losses.as<T>(),
                          dlogits ? dlogits->as<T>() : nullptr, T(grad_scale));
  });
}

}  // namespace

void CpuBackend::cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab, Tensor& losses) {
  run_cross_entropy(logits, targets, vocab, losses, nullptr, 0.0f);
}

void CpuBackend::cross_entropy_forward_backward(Tensor& logits, const Tensor& targets, int64_t vocab, float grad_scale,
                                                Tensor& losses) {
  run_cross_entropy(logits, targets, vocab, losses, &logits, grad_scale);
}

double CpuBackend::sum_of_squares(const Tensor& t) {
  expect_cpu(t, "sum_of_squares input");
  double result = 0;
  dispatch_real(t.dtype, [&]<typename T>() { result = cpu::sum_of_squares<T>(t.as<T>(), t.numel()); });
  return result;
}

void CpuBackend::optimizer_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& params_out,
                                const OptimizerParams& params) {
  const Shape flat{master.numel()};
  for (const Tensor* t : TensorList{&grad, &m}) expect(*t, "optimizer operand", flat, master.dtype);
  if (params.kind != OptimizerKind::sgd) expect(v, "optimizer second moment", flat, master.dtype);
  dispatch_real(master.dtype, [&]<typename T>() {
    cpu::optimizer_step<T>(master.as<T>(), grad.as<T>(), m.as<T>(), v.empty() ? nullptr : v.as<T>(), master.numel(),
                           params);
  });
  if (!params_out.empty()) copy(master, params_out);
}

}  // namespace zb
