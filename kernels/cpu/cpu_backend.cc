#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "core/random.h"
#include "kernels/clip_factor.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/op_checks.h"

namespace zb {

namespace {

const Device kCpu = Device::cpu();

// Calls fn.template operator()<T>() with T = float or double, matching dtype.
template <typename Fn>
void dispatch_real(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn.template operator()<float>(); return;
    case DType::f64: fn.template operator()<double>(); return;
    default: ZB_CHECK(false, "the CPU backend computes in fp32 or fp64, not ", dtype_name(dtype));
  }
}

// Ids are read on the host before any loop runs, so a bad id is an error rather than a wild read.
void expect_ids_below(const Tensor& ids, int64_t bound, const char* what) {
  const int32_t* p = ids.as<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    ZB_CHECK(p[i] >= 0 && p[i] < bound, what, "[", i, "] = ", p[i], " is outside [0, ", bound, ")");
}

// The reference's overwrite: zero the gradients (the empty ones are absent, as an unbiased layer's dbias), then
// add to them as the add mode does, so the two modes can only differ by what the tensors held before.
void zero_to_overwrite(GradWrite write, std::initializer_list<Tensor*> grads) {
  if (write != GradWrite::overwrite) return;
  for (Tensor* g : grads) {
    if (!g->empty()) std::memset(g->data, 0, g->bytes());
  }
}

struct HostTimingEvent final : TimingEvent {
  std::chrono::steady_clock::time_point when = std::chrono::steady_clock::now();
};

}  // namespace

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  checks::on_device(src, kCpu, "copy source");
  checks::on_device(dst, kCpu, "copy destination");
  ZB_CHECK(src.bytes() == dst.bytes(), "copy of ", src.describe(), " into ", dst.describe());
  if (src.bytes()) std::memmove(dst.data, src.data, src.bytes());
}

void CpuBackend::convert(const Tensor& src, Tensor& dst) {
  checks::on_device(src, kCpu, "convert source");
  checks::on_device(dst, kCpu, "convert destination");
  ZB_CHECK(src.numel() == dst.numel(), "convert ", src.describe(), " into ", dst.describe());
  dispatch_real(src.dtype, [&]<typename S>() {
    dispatch_real(dst.dtype, [&]<typename D>() {
      const S* from = src.as<S>();
      D* to = dst.as<D>();
      for (int64_t i = 0; i < src.numel(); ++i) to[i] = D(from[i]);
    });
  });
}

void CpuBackend::fill_zero(Tensor& t) {
  checks::on_device(t, kCpu, "fill_zero target");
  if (t.bytes()) std::memset(t.data, 0, t.bytes());
}

void CpuBackend::fill_normal(Tensor& t, uint64_t seed, uint64_t stream, int64_t first, double std) {
  checks::on_device(t, kCpu, "fill_normal target");
  dispatch_real(t.dtype, [&]<typename T>() {
    T* out = t.as<T>();
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = T(std * random_normal(seed, stream, uint64_t(first + i)));
  });
}

void CpuBackend::fill_value(Tensor& t, double value) {
  checks::on_device(t, kCpu, "fill_value target");
  dispatch_real(t.dtype, [&]<typename T>() { std::fill(t.as<T>(), t.as<T>() + t.numel(), T(value)); });
}

std::unique_ptr<TimingEvent> CpuBackend::record_event() { return std::make_unique<HostTimingEvent>(); }

double CpuBackend::elapsed_ms(const TimingEvent& start, const TimingEvent& end) {
  const auto& a = dynamic_cast<const HostTimingEvent&>(start);
  const auto& b = dynamic_cast<const HostTimingEvent&>(end);
  return std::chrono::duration<double, std::milli>(b.when - a.when).count();
}

void CpuBackend::embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, bool accumulate) {
  const auto [v, c] = checks::embedding(ids, table, out, kCpu);
  expect_ids_below(ids, v, "ids");
  dispatch_real(table.dtype, [&]<typename T>() {
    cpu::embedding_forward<T>(ids.as<int32_t>(), table.as<T>(), out.as<T>(), ids.numel(), c, accumulate);
  });
}

void CpuBackend::embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dtable, GradWrite write) {
  const auto [v, c] = checks::embedding(ids, dtable, dout, kCpu);
  expect_ids_below(ids, v, "ids");
  zero_to_overwrite(write, {&dtable});
  dispatch_real(dtable.dtype, [&]<typename T>() {
    cpu::embedding_backward<T>(ids.as<int32_t>(), dout.as<T>(), dtable.as<T>(), ids.numel(), c);
  });
}

void CpuBackend::layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                                   Tensor& mean, Tensor& rstd) {
  const auto [n, c] = checks::layernorm(x, weight, bias, out, mean, rstd, kCpu);
  dispatch_real(x.dtype, [&]<typename T>() {
    cpu::layernorm_forward<T>(x.as<T>(), weight.as<T>(), bias.as<T>(), T(eps), out.as<T>(), mean.as<T>(), rstd.as<T>(),
                              n, c);
  });
}

void CpuBackend::layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                    const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, GradWrite write) {
  const auto [n, c] = checks::layernorm(x, weight, dbias, dout, mean, rstd, kCpu);
  checks::same_shape(x, dx, "layernorm dx", kCpu);
  checks::same_shape(weight, dweight, "layernorm dweight", kCpu);
  zero_to_overwrite(write, {&dweight, &dbias});
  dispatch_real(x.dtype, [&]<typename T>() {
    cpu::layernorm_backward<T>(dout.as<T>(), x.as<T>(), weight.as<T>(), mean.as<T>(), rstd.as<T>(), dx.as<T>(),
                               dweight.as<T>(), dbias.as<T>(), n, c);
  });
}

void CpuBackend::rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& out, Tensor& rstd,
                                 float gain_offset) {
  const auto [n, c] = checks::rmsnorm(x, weight, out, rstd, kCpu);
  dispatch_real(x.dtype, [&]<typename T>() {
    cpu::rmsnorm_forward<T>(x.as<T>(), weight.as<T>(), T(gain_offset), T(eps), out.as<T>(), rstd.as<T>(), n, c);
  });
}

// The reference is the composition itself.
void CpuBackend::residual_layernorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out,
                                            const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                                            Tensor& mean, Tensor& rstd) {
  residual_forward(a, b, residual_out);
  layernorm_forward(residual_out, weight, bias, eps, out, mean, rstd);
}

void CpuBackend::residual_rmsnorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out, const Tensor& weight,
                                          float eps, Tensor& out, Tensor& rstd, float gain_offset) {
  residual_forward(a, b, residual_out);
  rmsnorm_forward(residual_out, weight, eps, out, rstd, gain_offset);
}

void CpuBackend::rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                  Tensor& dx, Tensor& dweight, GradWrite write, float gain_offset) {
  const auto [n, c] = checks::rmsnorm(x, weight, dout, rstd, kCpu);
  checks::same_shape(x, dx, "rmsnorm dx", kCpu);
  checks::same_shape(weight, dweight, "rmsnorm dweight", kCpu);
  zero_to_overwrite(write, {&dweight});
  dispatch_real(x.dtype, [&]<typename T>() {
    cpu::rmsnorm_backward<T>(dout.as<T>(), x.as<T>(), weight.as<T>(), T(gain_offset), rstd.as<T>(), dx.as<T>(),
                             dweight.as<T>(), n, c);
  });
}

void CpuBackend::qk_norm_forward(const Tensor& qkv_in, const Tensor& q_weight, const Tensor& k_weight, float eps,
                                 float gain_offset, const AttentionShape& s, Tensor& qkv_out, Tensor& rstd) {
  checks::qk_norm(qkv_in, q_weight, k_weight, qkv_out, rstd, s, kCpu);
  dispatch_real(qkv_in.dtype, [&]<typename T>() {
    cpu::qk_norm_forward<T>(qkv_in.as<T>(), q_weight.as<T>(), k_weight.as<T>(), T(eps), T(gain_offset), s,
                            qkv_out.as<T>(), rstd.as<T>());
  });
}

void CpuBackend::qk_norm_backward(const Tensor& dout, const Tensor& qkv_in, const Tensor& q_weight,
                                  const Tensor& k_weight, const Tensor& rstd, float gain_offset,
                                  const AttentionShape& s, Tensor& dqkv_in, Tensor& dq_weight, Tensor& dk_weight,
                                  GradWrite write) {
  checks::qk_norm(qkv_in, q_weight, k_weight, dout, rstd, s, kCpu);
  checks::qk_norm_input_gradient(dout, qkv_in, dqkv_in, kCpu);
  checks::norm_weight_gradient(q_weight, dq_weight, kCpu);
  checks::norm_weight_gradient(k_weight, dk_weight, kCpu);
  zero_to_overwrite(write, {&dq_weight, &dk_weight});
  dispatch_real(qkv_in.dtype, [&]<typename T>() {
    cpu::qk_norm_backward<T>(dout.as<T>(), qkv_in.as<T>(), q_weight.as<T>(), k_weight.as<T>(), rstd.as<T>(),
                             T(gain_offset), s, dqkv_in.as<T>(), dq_weight.empty() ? nullptr : dq_weight.as<T>(),
                             dk_weight.empty() ? nullptr : dk_weight.as<T>());
  });
}

void CpuBackend::matmul_forward(const Tensor& inp, const Tensor& weight, const Tensor& bias, Tensor& out) {
  const auto [n, k, m] = checks::matmul(inp, weight, bias, out, kCpu);
  dispatch_real(inp.dtype, [&]<typename T>() {
    cpu::matmul_forward<T>(inp.as<T>(), weight.as<T>(), bias.empty() ? nullptr : bias.as<T>(), out.as<T>(), n, k, m);
  });
}

void CpuBackend::matmul_backward(const Tensor& dout, const Tensor& inp, const Tensor& weight, Tensor& dinp,
                                 Tensor& dweight, Tensor& dbias, GradWrite write) {
  const auto [n, k, m] = checks::matmul(inp, weight, dbias, dout, kCpu);
  checks::same_shape(inp, dinp, "matmul dinp", kCpu);
  checks::weight_gradient(weight, dweight, kCpu);
  zero_to_overwrite(write, {&dweight, &dbias});
  dispatch_real(inp.dtype, [&]<typename T>() {
    cpu::matmul_backward<T>(dout.as<T>(), inp.as<T>(), weight.as<T>(), dinp.as<T>(),
                            dweight.empty() ? nullptr : dweight.as<T>(), dbias.empty() ? nullptr : dbias.as<T>(), n, k,
                            m);
  });
}

void CpuBackend::dropout_mask(const Tensor& x, double p, uint64_t seed, uint64_t stream, Tensor& out) {
  const int64_t n = checks::same_shape(x, out, "dropout", kCpu);
  ZB_CHECK(0 <= p && p < 1, "dropout probability ", p, " outside [0, 1)");
  dispatch_real(x.dtype, [&]<typename T>() { cpu::dropout_mask<T>(x.as<T>(), p, seed, stream, out.as<T>(), n); });
}

void CpuBackend::gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, double alpha,
                      bool accumulate, Tensor& out) {
  const auto [rows, inner, cols] = checks::gemm(a, transpose_a, b, transpose_b, out, kCpu);
  dispatch_real(a.dtype, [&]<typename T>() {
    cpu::gemm<T>(a.as<T>(), transpose_a, b.as<T>(), transpose_b, T(alpha), accumulate, out.as<T>(), rows, inner, cols);
  });
}

void CpuBackend::attention_forward(const Tensor& qkv, const AttentionShape& s, Tensor& out, Tensor& lse) {
  checks::attention(qkv, s, out, lse, kCpu);
  dispatch_real(qkv.dtype, [&]<typename T>() { cpu::attention_forward<T>(qkv.as<T>(), s, out.as<T>(), lse.as<T>()); });
}

void CpuBackend::attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                    const AttentionShape& s, Tensor& dqkv) {
  checks::attention(qkv, s, out, lse, kCpu);
  checks::same_shape(out, dout, "attention dout", kCpu);
  checks::same_shape(qkv, dqkv, "attention dqkv", kCpu);
  dispatch_real(qkv.dtype, [&]<typename T>() {
    cpu::attention_backward<T>(dout.as<T>(), qkv.as<T>(), out.as<T>(), lse.as<T>(), s, dqkv.as<T>());
  });
}

void CpuBackend::rope_forward(Tensor& qkv, const Tensor& inv_freq, const AttentionShape& s) {
  checks::rope(qkv, inv_freq, s, kCpu);
  dispatch_real(qkv.dtype, [&]<typename T>() { cpu::rope_rotate<T>(qkv.as<T>(), inv_freq.as<T>(), s, +1); });
}

void CpuBackend::rope_backward(Tensor& dqkv, const Tensor& inv_freq, const AttentionShape& s) {
  checks::rope(dqkv, inv_freq, s, kCpu);
  dispatch_real(dqkv.dtype, [&]<typename T>() { cpu::rope_rotate<T>(dqkv.as<T>(), inv_freq.as<T>(), s, -1); });
}

void CpuBackend::gelu_forward(const Tensor& inp, Tensor& out) {
  const int64_t n = checks::same_shape(inp, out, "gelu", kCpu);
  dispatch_real(inp.dtype, [&]<typename T>() { cpu::gelu_forward<T>(inp.as<T>(), out.as<T>(), n); });
}

void CpuBackend::gelu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  const int64_t n = checks::same_shape(inp, dout, "gelu", kCpu);
  checks::same_shape(inp, dinp, "gelu dinp", kCpu);
  dispatch_real(inp.dtype, [&]<typename T>() { cpu::gelu_backward<T>(dout.as<T>(), inp.as<T>(), dinp.as<T>(), n); });
}

void CpuBackend::relu_forward(const Tensor& inp, Tensor& out) {
  const int64_t n = checks::same_shape(inp, out, "relu", kCpu);
  dispatch_real(inp.dtype, [&]<typename T>() { cpu::relu_forward<T>(inp.as<T>(), out.as<T>(), n); });
}

void CpuBackend::relu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  const int64_t n = checks::same_shape(inp, dout, "relu", kCpu);
  checks::same_shape(inp, dinp, "relu dinp", kCpu);
  dispatch_real(inp.dtype, [&]<typename T>() { cpu::relu_backward<T>(dout.as<T>(), inp.as<T>(), dinp.as<T>(), n); });
}

void CpuBackend::swiglu_forward(const Tensor& inp, Tensor& out) {
  const auto [n, f] = checks::swiglu(inp, out, kCpu);
  dispatch_real(inp.dtype, [&]<typename T>() { cpu::swiglu_forward<T>(inp.as<T>(), out.as<T>(), n, f); });
}

void CpuBackend::swiglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  const auto [n, f] = checks::swiglu(inp, dout, kCpu);
  checks::same_shape(inp, dinp, "swiglu dinp", kCpu);
  dispatch_real(inp.dtype, [&]<typename T>() {
    cpu::swiglu_backward<T>(dout.as<T>(), inp.as<T>(), dinp.as<T>(), n, f);
  });
}

void CpuBackend::geglu_forward(const Tensor& inp, Tensor& out) {
  const auto [n, f] = checks::geglu(inp, out, kCpu);
  dispatch_real(inp.dtype, [&]<typename T>() { cpu::geglu_forward<T>(inp.as<T>(), out.as<T>(), n, f); });
}

void CpuBackend::geglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  const auto [n, f] = checks::geglu(inp, dout, kCpu);
  checks::same_shape(inp, dinp, "geglu dinp", kCpu);
  dispatch_real(inp.dtype, [&]<typename T>() {
    cpu::geglu_backward<T>(dout.as<T>(), inp.as<T>(), dinp.as<T>(), n, f);
  });
}

void CpuBackend::scale(const Tensor& x, double factor, Tensor& out) {
  const int64_t n = checks::same_shape(x, out, "scale", kCpu);
  ZB_CHECK(std::isfinite(factor), "scale by ", factor);
  dispatch_real(x.dtype, [&]<typename T>() { cpu::scale<T>(x.as<T>(), T(factor), out.as<T>(), n); });
}

void CpuBackend::residual_forward(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = checks::same_shape(a, b, "residual input", kCpu);
  checks::same_shape(a, out, "residual output", kCpu);
  dispatch_real(a.dtype, [&]<typename T>() { cpu::residual_forward<T>(a.as<T>(), b.as<T>(), out.as<T>(), n); });
}

namespace {

void run_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab, Tensor& losses, Tensor* dlogits,
                       float grad_scale) {
  const auto [n, padded_vocab] = checks::cross_entropy(logits, targets, vocab, losses, kCpu);
  expect_ids_below(targets, vocab, "targets");
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

double CpuBackend::sum_of_squares(const std::vector<Tensor>& tensors) {
  double total = 0;
  for (const Tensor& t : tensors) {
    checks::on_device(t, kCpu, "sum_of_squares input");
    dispatch_real(t.dtype, [&]<typename T>() { total += cpu::sum_of_squares<T>(t.as<T>(), t.numel()); });
  }
  return total;
}

void CpuBackend::sum_of_squares_into(const std::vector<Tensor>& tensors, Tensor& total) {
  checks::expect(total, "sum_of_squares total", Shape{1}, DType::f64, kCpu);
  *total.as<double>() = sum_of_squares(tensors);
}

void CpuBackend::accumulate_sum(const Tensor& values, double scale, Tensor& total) {
  checks::on_device(values, kCpu, "accumulate_sum values");
  checks::expect(total, "accumulate_sum total", Shape{1}, DType::f64, kCpu);
  double sum = 0;
  dispatch_real(values.dtype, [&]<typename T>() {
    for (int64_t i = 0; i < values.numel(); ++i) sum += double(values.as<T>()[i]);
  });
  *total.as<double>() += scale * sum;
}

void CpuBackend::clip_factor(const Tensor& sum_of_squares, const Tensor& loss, float max_norm, float loss_scale,
                             Tensor& factor) {
  checks::expect(sum_of_squares, "clip_factor sum_of_squares", Shape{1}, DType::f64, kCpu);
  checks::expect(loss, "clip_factor loss", Shape{1}, DType::f64, kCpu);
  checks::expect(factor, "clip_factor factor", Shape{1}, DType::f32, kCpu);
  *factor.as<float>() = zb::clip_factor(*sum_of_squares.as<double>(), *loss.as<double>(), max_norm, loss_scale);
}

void CpuBackend::optimizer_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& params_out,
                                const OptimizerParams& params) {
  checks::optimizer(master, grad, m, v, params_out, params.kind != OptimizerKind::sgd, kCpu);
  ZB_CHECK(grad.dtype == master.dtype, "the CPU optimizer takes gradients in the master dtype");
  OptimizerParams resolved = params;
  if (params.grad_factor) {
    if (!std::isfinite(*params.grad_factor)) return;  // a skipped step: see OptimizerParams::grad_factor
    resolved.grad_scale = *params.grad_factor;
    resolved.grad_factor = nullptr;
  }
  dispatch_real(master.dtype, [&]<typename T>() {
    cpu::optimizer_step<T>(master.as<T>(), grad.as<T>(), m.as<T>(), v.empty() ? nullptr : v.as<T>(), master.numel(),
                           resolved);
  });
  if (!params_out.empty()) convert(master, params_out);
}

void CpuBackend::optimizer_step_8bit(Tensor& master, const Tensor& grad, const QuantizedMoments& moments,
                                     Tensor& params_out, const OptimizerParams& params) {
  checks::expect(master, "optimizer_step_8bit master", master.shape, DType::f32, kCpu);
  checks::expect(grad, "optimizer_step_8bit grad", master.shape, DType::f32, kCpu);
  OptimizerParams resolved = params;
  if (params.grad_factor) {
    if (!std::isfinite(*params.grad_factor)) return;  // a skipped step: see OptimizerParams::grad_factor
    resolved.grad_scale = *params.grad_factor;
    resolved.grad_factor = nullptr;
  }
  cpu::optimizer_step_8bit(master.as<float>(), grad.as<float>(), moments, master.numel(), resolved);
  if (!params_out.empty()) convert(master, params_out);
}

}  // namespace zb
