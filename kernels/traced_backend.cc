#include "kernels/traced_backend.h"

#include <initializer_list>

#include "core/trace.h"

namespace zb {

namespace {

double bytes_of(std::initializer_list<const Tensor*> tensors) {
  double bytes = 0;
  for (const Tensor* t : tensors) bytes += double(t->bytes());
  return bytes;
}

// 2 m k n: a product of [m, k] by [k, n].
double gemm_flops(int64_t m, int64_t k, int64_t n) { return 2.0 * double(m) * double(k) * double(n); }

double attention_forward_flops(const AttentionShape& s) {
  return 2.0 * double(s.batch) * double(s.heads) * double(s.seq) * double(s.key_span()) * double(s.head_dim);
}

// On the CPU backend a copy is the work itself; on a device the host's slice is its launch (the device's record of
// the copy is the work).
TraceCategory copy_category(const Backend& backend) {
  return backend.device().is_cuda() ? TraceCategory::op : TraceCategory::copy;
}

}  // namespace

void TracedBackend::copy(const Tensor& src, Tensor& dst) {
  TraceScope scope(copy_category(inner_), "copy", 0, double(src.bytes()));
  inner_.copy(src, dst);
}

void TracedBackend::copy_queued(const Tensor& src, Tensor& dst) {
  TraceScope scope(copy_category(inner_), "copy_queued", 0, double(src.bytes()));
  inner_.copy_queued(src, dst);
}

void TracedBackend::convert(const Tensor& src, Tensor& dst) {
  TraceScope scope(TraceCategory::op, "convert", 0, bytes_of({&src, &dst}));
  inner_.convert(src, dst);
}

void TracedBackend::fill_zero(Tensor& t) {
  TraceScope scope(TraceCategory::op, "fill_zero", 0, double(t.bytes()));
  inner_.fill_zero(t);
}

void TracedBackend::fill_normal(Tensor& t, uint64_t seed, uint64_t stream, int64_t first, double std) {
  TraceScope scope(TraceCategory::op, "fill_normal", 0, double(t.bytes()));
  inner_.fill_normal(t, seed, stream, first, std);
}

void TracedBackend::fill_value(Tensor& t, double value) {
  TraceScope scope(TraceCategory::op, "fill_value", 0, double(t.bytes()));
  inner_.fill_value(t, value);
}

// Waits on the host for the device: slices of their own (the CPU backend never waits).
void TracedBackend::synchronize() {
  if (!inner_.device().is_cuda()) return inner_.synchronize();
  TraceScope scope(TraceCategory::wait, "synchronize");
  inner_.synchronize();
}

void TracedBackend::wait_for(const TimingEvent& event) {
  if (!inner_.device().is_cuda()) return inner_.wait_for(event);
  TraceScope scope(TraceCategory::wait, "wait_for_event");
  inner_.wait_for(event);
}

void TracedBackend::embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, bool accumulate) {
  TraceScope scope(TraceCategory::op, "embedding_forward", 0, bytes_of({&ids, &out}) * (accumulate ? 2 : 1));
  inner_.embedding_forward(ids, table, out, accumulate);
}

void TracedBackend::embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dtable, GradWrite write) {
  TraceScope scope(TraceCategory::op, "embedding_backward", 0, bytes_of({&ids, &dout, &dtable}));
  inner_.embedding_backward(ids, dout, dtable, write);
}

void TracedBackend::layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                                      Tensor& out, Tensor& mean, Tensor& rstd) {
  TraceScope scope(TraceCategory::op, "layernorm_forward", 0, bytes_of({&x, &weight, &bias, &out, &mean, &rstd}));
  inner_.layernorm_forward(x, weight, bias, eps, out, mean, rstd);
}

void TracedBackend::layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                       const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias,
                                       GradWrite write) {
  TraceScope scope(TraceCategory::op, "layernorm_backward", 0,
                   bytes_of({&dout, &x, &weight, &mean, &rstd, &dx, &dx, &dweight, &dbias}));
  inner_.layernorm_backward(dout, x, weight, mean, rstd, dx, dweight, dbias, write);
}

void TracedBackend::rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& out, Tensor& rstd,
                                    float gain_offset) {
  TraceScope scope(TraceCategory::op, "rmsnorm_forward", 0, bytes_of({&x, &weight, &out, &rstd}));
  inner_.rmsnorm_forward(x, weight, eps, out, rstd, gain_offset);
}

void TracedBackend::residual_layernorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out,
                                               const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                                               Tensor& mean, Tensor& rstd) {
  TraceScope scope(TraceCategory::op, "residual_layernorm_forward", 0,
                   bytes_of({&a, &b, &residual_out, &weight, &bias, &out, &mean, &rstd}));
  inner_.residual_layernorm_forward(a, b, residual_out, weight, bias, eps, out, mean, rstd);
}

void TracedBackend::residual_rmsnorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out,
                                             const Tensor& weight, float eps, Tensor& out, Tensor& rstd,
                                             float gain_offset) {
  TraceScope scope(TraceCategory::op, "residual_rmsnorm_forward", 0,
                   bytes_of({&a, &b, &residual_out, &weight, &out, &rstd}));
  inner_.residual_rmsnorm_forward(a, b, residual_out, weight, eps, out, rstd, gain_offset);
}

void TracedBackend::rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                     Tensor& dx, Tensor& dweight, GradWrite write, float gain_offset) {
  TraceScope scope(TraceCategory::op, "rmsnorm_backward", 0, bytes_of({&dout, &x, &weight, &rstd, &dx, &dx, &dweight}));
  inner_.rmsnorm_backward(dout, x, weight, rstd, dx, dweight, write, gain_offset);
}

void TracedBackend::qk_norm_forward(const Tensor& qkv_in, const Tensor& q_weight, const Tensor& k_weight, float eps,
                                    float gain_offset, const AttentionShape& shape, Tensor& qkv_out, Tensor& rstd) {
  TraceScope scope(TraceCategory::op, "qk_norm_forward", 0,
                   bytes_of({&qkv_in, &q_weight, &k_weight, &qkv_out, &rstd}));
  inner_.qk_norm_forward(qkv_in, q_weight, k_weight, eps, gain_offset, shape, qkv_out, rstd);
}

void TracedBackend::qk_norm_backward(const Tensor& dout, const Tensor& qkv_in, const Tensor& q_weight,
                                     const Tensor& k_weight, const Tensor& rstd, float gain_offset,
                                     const AttentionShape& shape, Tensor& dqkv_in, Tensor& dq_weight,
                                     Tensor& dk_weight, GradWrite write) {
  TraceScope scope(TraceCategory::op, "qk_norm_backward", 0,
                   bytes_of({&dout, &qkv_in, &q_weight, &k_weight, &rstd, &dqkv_in, &dq_weight, &dk_weight}));
  inner_.qk_norm_backward(dout, qkv_in, q_weight, k_weight, rstd, gain_offset, shape, dqkv_in, dq_weight, dk_weight,
                          write);
}

void TracedBackend::matmul_forward(const Tensor& inp, const Tensor& weight, const Tensor& bias, Tensor& out) {
  TraceScope scope(TraceCategory::op, "matmul_forward", gemm_flops(out.dim(0), inp.dim(1), out.dim(1)),
                   bytes_of({&inp, &weight, &bias, &out}));
  inner_.matmul_forward(inp, weight, bias, out);
}

void TracedBackend::matmul_gelu_forward(const Tensor& inp, const Tensor& weight, const Tensor& bias, Tensor& pre,
                                        Tensor& out) {
  TraceScope scope(TraceCategory::op, "matmul_gelu_forward", gemm_flops(out.dim(0), inp.dim(1), out.dim(1)),
                   bytes_of({&inp, &weight, &bias, &pre, &out}));
  inner_.matmul_gelu_forward(inp, weight, bias, pre, out);
}

void TracedBackend::matmul_backward(const Tensor& dout, const Tensor& inp, const Tensor& weight, Tensor& dinp,
                                    Tensor& dweight, Tensor& dbias, GradWrite write) {
  const double products = dweight.numel() > 0 ? 2 : 1;  // a frozen weight gets no gradient
  TraceScope scope(TraceCategory::op, "matmul_backward", products * gemm_flops(dout.dim(0), dout.dim(1), inp.dim(1)),
                   bytes_of({&dout, &inp, &weight, &dinp, &dweight, &dbias}));
  inner_.matmul_backward(dout, inp, weight, dinp, dweight, dbias, write);
}

void TracedBackend::matmul_gelu_backward(const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                         const Tensor& pre, Tensor& dpre, Tensor& dweight, Tensor& dbias,
                                         GradWrite write) {
  const double products = dweight.numel() > 0 ? 2 : 1;
  TraceScope scope(TraceCategory::op, "matmul_gelu_backward",
                   products * gemm_flops(dout.dim(0), dout.dim(1), inp.dim(1)),
                   bytes_of({&dout, &inp, &weight, &pre, &dpre, &dweight, &dbias}));
  inner_.matmul_gelu_backward(dout, inp, weight, pre, dpre, dweight, dbias, write);
}

void TracedBackend::gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, double alpha,
                         bool accumulate, Tensor& out) {
  const int64_t inner = transpose_a ? a.dim(0) : a.dim(1);
  TraceScope scope(TraceCategory::op, "gemm", gemm_flops(out.dim(0), inner, out.dim(1)),
                   bytes_of({&a, &b, &out}) + (accumulate ? double(out.bytes()) : 0));
  inner_.gemm(a, transpose_a, b, transpose_b, alpha, accumulate, out);
}

void TracedBackend::dropout_mask(const Tensor& x, double p, uint64_t seed, uint64_t stream, Tensor& out) {
  TraceScope scope(TraceCategory::op, "dropout_mask", 0, bytes_of({&x, &out}));
  inner_.dropout_mask(x, p, seed, stream, out);
}

void TracedBackend::attention_forward(const Tensor& qkv, const AttentionShape& shape, Tensor& out, Tensor& lse) {
  TraceScope scope(TraceCategory::op, "attention_forward", attention_forward_flops(shape),
                   bytes_of({&qkv, &out, &lse}));
  inner_.attention_forward(qkv, shape, out, lse);
}

void TracedBackend::attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                       const AttentionShape& shape, Tensor& dqkv) {
  TraceScope scope(TraceCategory::op, "attention_backward", 2.5 * attention_forward_flops(shape),
                   bytes_of({&dout, &qkv, &out, &lse, &dqkv}));
  inner_.attention_backward(dout, qkv, out, lse, shape, dqkv);
}

void TracedBackend::rope_forward(Tensor& qkv, const Tensor& inv_freq, const AttentionShape& shape) {
  TraceScope scope(TraceCategory::op, "rope_forward", 0, 2.0 * double(qkv.bytes()));
  inner_.rope_forward(qkv, inv_freq, shape);
}

void TracedBackend::rope_backward(Tensor& dqkv, const Tensor& inv_freq, const AttentionShape& shape) {
  TraceScope scope(TraceCategory::op, "rope_backward", 0, 2.0 * double(dqkv.bytes()));
  inner_.rope_backward(dqkv, inv_freq, shape);
}

void TracedBackend::gelu_forward(const Tensor& inp, Tensor& out) {
  TraceScope scope(TraceCategory::op, "gelu_forward", 0, bytes_of({&inp, &out}));
  inner_.gelu_forward(inp, out);
}

void TracedBackend::gelu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  TraceScope scope(TraceCategory::op, "gelu_backward", 0, bytes_of({&dout, &inp, &dinp}));
  inner_.gelu_backward(dout, inp, dinp);
}

void TracedBackend::relu_forward(const Tensor& inp, Tensor& out) {
  TraceScope scope(TraceCategory::op, "relu_forward", 0, bytes_of({&inp, &out}));
  inner_.relu_forward(inp, out);
}

void TracedBackend::relu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  TraceScope scope(TraceCategory::op, "relu_backward", 0, bytes_of({&dout, &inp, &dinp}));
  inner_.relu_backward(dout, inp, dinp);
}

void TracedBackend::swiglu_forward(const Tensor& inp, Tensor& out) {
  TraceScope scope(TraceCategory::op, "swiglu_forward", 0, bytes_of({&inp, &out}));
  inner_.swiglu_forward(inp, out);
}

void TracedBackend::swiglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  TraceScope scope(TraceCategory::op, "swiglu_backward", 0, bytes_of({&dout, &inp, &dinp}));
  inner_.swiglu_backward(dout, inp, dinp);
}

void TracedBackend::geglu_forward(const Tensor& inp, Tensor& out) {
  TraceScope scope(TraceCategory::op, "geglu_forward", 0, bytes_of({&inp, &out}));
  inner_.geglu_forward(inp, out);
}

void TracedBackend::geglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  TraceScope scope(TraceCategory::op, "geglu_backward", 0, bytes_of({&dout, &inp, &dinp}));
  inner_.geglu_backward(dout, inp, dinp);
}

void TracedBackend::scale(const Tensor& x, double factor, Tensor& out) {
  TraceScope scope(TraceCategory::op, "scale", 0, bytes_of({&x, &out}));
  inner_.scale(x, factor, out);
}

void TracedBackend::residual_forward(const Tensor& a, const Tensor& b, Tensor& out) {
  TraceScope scope(TraceCategory::op, "residual_forward", 0, bytes_of({&a, &b, &out}));
  inner_.residual_forward(a, b, out);
}

void TracedBackend::cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab,
                                          Tensor& losses) {
  TraceScope scope(TraceCategory::op, "cross_entropy_forward", 0, bytes_of({&logits, &targets, &losses}));
  inner_.cross_entropy_forward(logits, targets, vocab, losses);
}

void TracedBackend::cross_entropy_forward_backward(Tensor& logits, const Tensor& targets, int64_t vocab,
                                                   float grad_scale, Tensor& losses) {
  TraceScope scope(TraceCategory::op, "cross_entropy_forward_backward", 0,
                   bytes_of({&logits, &logits, &targets, &losses}));
  inner_.cross_entropy_forward_backward(logits, targets, vocab, grad_scale, losses);
}

namespace {
double bytes_of_all(const std::vector<Tensor>& tensors) {
  double bytes = 0;
  for (const Tensor& t : tensors) bytes += double(t.bytes());
  return bytes;
}
}  // namespace

double TracedBackend::sum_of_squares(const std::vector<Tensor>& tensors) {
  TraceScope scope(TraceCategory::op, "sum_of_squares", 0, bytes_of_all(tensors));
  return inner_.sum_of_squares(tensors);
}

void TracedBackend::sum_of_squares_into(const std::vector<Tensor>& tensors, Tensor& total) {
  TraceScope scope(TraceCategory::op, "sum_of_squares", 0, bytes_of_all(tensors));
  inner_.sum_of_squares_into(tensors, total);
}

void TracedBackend::accumulate_sum(const Tensor& values, double scale, Tensor& total) {
  TraceScope scope(TraceCategory::op, "accumulate_sum", 0, double(values.bytes()));
  inner_.accumulate_sum(values, scale, total);
}

void TracedBackend::clip_factor(const Tensor& sum_of_squares, const Tensor& loss, float max_norm, float loss_scale,
                                Tensor& factor) {
  TraceScope scope(TraceCategory::op, "clip_factor");
  inner_.clip_factor(sum_of_squares, loss, max_norm, loss_scale, factor);
}

void TracedBackend::optimizer_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& params_out,
                                   const OptimizerParams& params) {
  // Reads and writes the master and both moments, reads the gradient, writes the weights.
  TraceScope scope(TraceCategory::op, "optimizer_step", 0,
                   2.0 * bytes_of({&master, &m, &v}) + bytes_of({&grad, &params_out}));
  inner_.optimizer_step(master, grad, m, v, params_out, params);
}

void TracedBackend::optimizer_step_8bit(Tensor& master, const Tensor& grad, const QuantizedMoments& moments,
                                        Tensor& params_out, const OptimizerParams& params) {
  TraceScope scope(TraceCategory::op, "optimizer_step_8bit", 0,
                   2.0 * double(master.bytes()) + 4.0 * double(master.numel()) + bytes_of({&grad, &params_out}));
  inner_.optimizer_step_8bit(master, grad, moments, params_out, params);
}

}  // namespace zb
