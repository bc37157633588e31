// DryRunBackend: a backend that does no work. Every op returns at once without reading or writing its tensors,
// so that the engine's own code can run over memory that is only counted (CountingMemory): the model, the ZeRO
// schedule and the parameter store then allocate exactly what they would in training, which is how the engine
// predicts its memory (engine/memory_plan.h) for models and machines it does not have.
#pragma once

#include <memory>
#include <vector>

#include "kernels/backend.h"

namespace zb {

class DryRunBackend final : public Backend {
 public:
  explicit DryRunBackend(Device device = Device::cpu()) : device_(device) {}
  Device device() const override { return device_; }

  void copy(const Tensor&, Tensor&) override {}
  void convert(const Tensor&, Tensor&) override {}
  void fill_zero(Tensor&) override {}
  void fill_normal(Tensor&, uint64_t, uint64_t, int64_t, double) override {}
  void fill_value(Tensor&, double) override {}
  void synchronize() override {}
  std::unique_ptr<TimingEvent> record_event() override { return std::make_unique<TimingEvent>(); }
  double elapsed_ms(const TimingEvent&, const TimingEvent&) override { return 0; }
  void wait_for(const TimingEvent&) override {}
  void copy_queued(const Tensor&, Tensor&) override {}

  void embedding_forward(const Tensor&, const Tensor&, Tensor&, bool) override {}
  void embedding_backward(const Tensor&, const Tensor&, Tensor&, GradWrite) override {}
  void layernorm_forward(const Tensor&, const Tensor&, const Tensor&, float, Tensor&, Tensor&, Tensor&) override {}
  void layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                          Tensor&, GradWrite) override {}
  void rmsnorm_forward(const Tensor&, const Tensor&, float, Tensor&, Tensor&, float) override {}
  void residual_layernorm_forward(const Tensor&, const Tensor&, Tensor&, const Tensor&, const Tensor&, float, Tensor&,
                                  Tensor&, Tensor&) override {}
  void residual_rmsnorm_forward(const Tensor&, const Tensor&, Tensor&, const Tensor&, float, Tensor&, Tensor&,
                                float) override {}
  void rmsnorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, GradWrite,
                        float) override {}
  void qk_norm_forward(const Tensor&, const Tensor&, const Tensor&, float, float, const AttentionShape&, Tensor&,
                       Tensor&) override {}
  void qk_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float,
                        const AttentionShape&, Tensor&, Tensor&, Tensor&, GradWrite) override {}
  void matmul_forward(const Tensor&, const Tensor&, const Tensor&, Tensor&) override {}
  void matmul_gelu_forward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) override {}
  void matmul_backward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, GradWrite) override {}
  void matmul_gelu_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&,
                            GradWrite) override {}
  void gemm(const Tensor&, bool, const Tensor&, bool, double, bool, Tensor&) override {}
  void dropout_mask(const Tensor&, double, uint64_t, uint64_t, Tensor&) override {}
  void attention_forward(const Tensor&, const AttentionShape&, Tensor&, Tensor&) override {}
  void attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AttentionShape&,
                          Tensor&) override {}
  void rope_forward(Tensor&, const Tensor&, const AttentionShape&) override {}
  void rope_backward(Tensor&, const Tensor&, const AttentionShape&) override {}
  void gelu_forward(const Tensor&, Tensor&) override {}
  void gelu_backward(const Tensor&, const Tensor&, Tensor&) override {}
  void relu_forward(const Tensor&, Tensor&) override {}
  void relu_backward(const Tensor&, const Tensor&, Tensor&) override {}
  void swiglu_forward(const Tensor&, Tensor&) override {}
  void swiglu_backward(const Tensor&, const Tensor&, Tensor&) override {}
  void geglu_forward(const Tensor&, Tensor&) override {}
  void geglu_backward(const Tensor&, const Tensor&, Tensor&) override {}
  void residual_forward(const Tensor&, const Tensor&, Tensor&) override {}
  void scale(const Tensor&, double, Tensor&) override {}
  void cross_entropy_forward(const Tensor&, const Tensor&, int64_t, Tensor&) override {}
  void cross_entropy_forward_backward(Tensor&, const Tensor&, int64_t, float, Tensor&) override {}
  double sum_of_squares(const std::vector<Tensor>&) override { return 0; }
  void sum_of_squares_into(const std::vector<Tensor>&, Tensor&) override {}
  void accumulate_sum(const Tensor&, double, Tensor&) override {}
  void clip_factor(const Tensor&, const Tensor&, float, float, Tensor&) override {}
  void optimizer_step(Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, const OptimizerParams&) override {}
  void optimizer_step_8bit(Tensor&, const Tensor&, const QuantizedMoments&, Tensor&, const OptimizerParams&) override {}

 private:
  Device device_;
};

}  // namespace zb
