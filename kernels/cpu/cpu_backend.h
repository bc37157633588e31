// CpuBackend: the reference implementation of Backend, in fp32 (training) or fp64 (gradient checks).
// It checks every argument's shape, dtype and device before calling the loops in cpu_ops.h.
#pragma once

#include "kernels/backend.h"

namespace zb {

class CpuBackend : public Backend {
 public:
  Device device() const override { return Device::cpu(); }

  void copy(const Tensor& src, Tensor& dst) override;
  void convert(const Tensor& src, Tensor& dst) override;
  void fill_zero(Tensor& t) override;
  void fill_normal(Tensor& t, uint64_t seed, uint64_t stream, int64_t first, double std) override;
  void fill_value(Tensor& t, double value) override;
  void synchronize() override {}
  std::unique_ptr<TimingEvent> record_event() override;
  double elapsed_ms(const TimingEvent& start, const TimingEvent& end) override;
  void wait_for(const TimingEvent&) override {}  // the work is done when each call returns
  void copy_queued(const Tensor& src, Tensor& dst) override { copy(src, dst); }

  void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, bool accumulate) override;
  void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dtable,
                          GradWrite write = GradWrite::add) override;

  void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out, Tensor& mean,
                         Tensor& rstd) override;
  void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias,
                          GradWrite write = GradWrite::add) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& out, Tensor& rstd,
                       float gain_offset = 0.0f) override;
  void residual_layernorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out, const Tensor& weight,
                                  const Tensor& bias, float eps, Tensor& out, Tensor& mean, Tensor& rstd) override;
  void residual_rmsnorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out, const Tensor& weight, float eps,
                                Tensor& out, Tensor& rstd, float gain_offset = 0.0f) override;
  void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                        Tensor& dweight, GradWrite write = GradWrite::add, float gain_offset = 0.0f) override;
  void qk_norm_forward(const Tensor& qkv_in, const Tensor& q_weight, const Tensor& k_weight, float eps,
                       float gain_offset, const AttentionShape& shape, Tensor& qkv_out, Tensor& rstd) override;
  void qk_norm_backward(const Tensor& dout, const Tensor& qkv_in, const Tensor& q_weight, const Tensor& k_weight,
                        const Tensor& rstd, float gain_offset, const AttentionShape& shape, Tensor& dqkv_in,
                        Tensor& dq_weight, Tensor& dk_weight, GradWrite write = GradWrite::add) override;

  void matmul_forward(const Tensor& inp, const Tensor& weight, const Tensor& bias, Tensor& out) override;
  void matmul_backward(const Tensor& dout, const Tensor& inp, const Tensor& weight, Tensor& dinp, Tensor& dweight,
                       Tensor& dbias, GradWrite write = GradWrite::add) override;
  void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, double alpha, bool accumulate,
            Tensor& out) override;
  void dropout_mask(const Tensor& x, double p, uint64_t seed, uint64_t stream, Tensor& out) override;

  void attention_forward(const Tensor& qkv, const AttentionShape& shape, Tensor& out, Tensor& lse) override;
  void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          const AttentionShape& shape, Tensor& dqkv) override;
  void rope_forward(Tensor& qkv, const Tensor& inv_freq, const AttentionShape& shape) override;
  void rope_backward(Tensor& dqkv, const Tensor& inv_freq, const AttentionShape& shape) override;

  void gelu_forward(const Tensor& inp, Tensor& out) override;
  void gelu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) override;
  void relu_forward(const Tensor& inp, Tensor& out) override;
  void relu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) override;
  void swiglu_forward(const Tensor& inp, Tensor& out) override;
  void swiglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) override;
  void geglu_forward(const Tensor& inp, Tensor& out) override;
  void geglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) override;
  void residual_forward(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(const Tensor& x, double factor, Tensor& out) override;

  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab, Tensor& losses) override;
  void cross_entropy_forward_backward(Tensor& logits, const Tensor& targets, int64_t vocab, float grad_scale,
                                      Tensor& losses) override;

  double sum_of_squares(const std::vector<Tensor>& tensors) override;
  void sum_of_squares_into(const std::vector<Tensor>& tensors, Tensor& total) override;
  void accumulate_sum(const Tensor& values, double scale, Tensor& total) override;
  void clip_factor(const Tensor& sum_of_squares, const Tensor& loss, float max_norm, float loss_scale,
                   Tensor& factor) override;
  void optimizer_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& params_out,
                      const OptimizerParams& params) override;
  void optimizer_step_8bit(Tensor& master, const Tensor& grad, const QuantizedMoments& moments, Tensor& params_out,
                           const OptimizerParams& params) override;
};

}  // namespace zb
