// The training loop on the CPU backend: tiny models learn, runs are reproducible to the bit, gradient
// accumulation equals the larger batch, and running out of memory is a clean, recoverable error.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <functional>
#include <memory>

#include "core/errors.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/model_registry.h"
#include "support/trainer_state.h"

namespace zb {
namespace {

// Replays one fixed batch forever (for overfitting).
class FixedBatch final : public TokenSource {
 public:
  explicit FixedBatch(TokenBatch batch) : batch_(std::move(batch)) {}
  TokenBatch next_batch() override { return batch_; }
  std::string describe() const override { return "one fixed batch"; }

 private:
  TokenBatch batch_;
};

TrainingOptions tiny_options(const std::string& model, int64_t batch = 4, int64_t seq = 32) {
  TrainingOptions o;
  o.model = resolve_model(model);
  o.batch = batch;
  o.seq = seq;
  o.optimizer.lr = 3e-3f;
  o.optimizer.weight_decay = 0.0f;
  return o;
}

class Overfit : public ::testing::TestWithParam<std::string> {};

TEST_P(Overfit, LossFallsByNinetyPercentWithin200Steps) {
  const TrainingOptions options = tiny_options(GetParam());
  FixedBatch data(make_synthetic_tokens({options.batch, options.seq, 0, 1}, options.model.vocab_size, 11)->next_batch());
  CpuBackend backend;
  TrackingAllocator allocator(std::make_unique<HostMemory>());
  Trainer trainer(options, backend, allocator, data);
  const double first = trainer.step().loss;
  double last = first;
  int steps = 1;
  while (steps < 200 && last > 0.1 * first) {
    last = trainer.step().loss;
    ++steps;
  }
  EXPECT_LE(last, 0.1 * first) << GetParam() << ": loss " << first << " -> " << last << " after " << steps << " steps";
}

INSTANTIATE_TEST_SUITE_P(TinyModels, Overfit, ::testing::Values("gpt2-tiny", "llama-tiny", "gemma3-tiny"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// Losses (and, when asked, gradient norms and final weights) of a run on synthetic tokens.
std::vector<double> losses_of(const TrainingOptions& options, int steps, std::vector<float>* final_params = nullptr,
                              std::vector<double>* grad_norms = nullptr, CpuBackend* on = nullptr) {
  CpuBackend own;
  CpuBackend& backend = on ? *on : own;
  TrackingAllocator allocator(std::make_unique<HostMemory>());
  auto data = make_synthetic_tokens({options.batch, options.seq, 0, 1}, options.model.vocab_size, options.seed);
  Trainer trainer(options, backend, allocator, *data);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    const StepStats stats = trainer.step();
    losses.push_back(stats.loss);
    if (grad_norms) grad_norms->push_back(stats.grad_norm);
  }
  if (final_params) {
    for (size_t u = 0; u < trainer.store().unit_count(); ++u) {
      const Tensor p = trainer.store().params(u);
      final_params->insert(final_params->end(), p.as<float>(), p.as<float>() + p.numel());
    }
  }
  return losses;
}

TEST(Trainer, TwoRunsGiveIdenticalLosses) {
  const TrainingOptions options = tiny_options("llama-tiny");
  EXPECT_EQ(losses_of(options, 5), losses_of(options, 5)) << "bit-identical: every reduction has a fixed order";
}

// A CPU backend that takes updates aside, as a GPU's second stream, and runs them only when the main sequence
// waits for them (queue_wait): as late as the device may. A read of a unit's weights (or a write of its
// gradient) that did not wait for the unit's update would see the old weights, or hand the update the next
// step's gradient and clipping factor.
class LateAsideBackend final : public CpuBackend {
 public:
  bool begin_aside() override { return aside_ = true; }
  void end_aside() override { aside_ = false; }
  std::unique_ptr<TimingEvent> record_event() override {
    return aside_ ? std::make_unique<Mark>(queued_.size()) : CpuBackend::record_event();
  }
  double elapsed_ms(const TimingEvent& start, const TimingEvent& end) override {
    return dynamic_cast<const Mark*>(&start) ? 0.0 : CpuBackend::elapsed_ms(start, end);
  }
  void queue_wait(const TimingEvent& event) override {
    while (run_ < dynamic_cast<const Mark&>(event).updates) queued_[run_++]();
  }
  void optimizer_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& params_out,
                      const OptimizerParams& params) override {
    if (!aside_) return CpuBackend::optimizer_step(master, grad, m, v, params_out, params);
    queued_.push_back([=, this]() mutable { CpuBackend::optimizer_step(master, grad, m, v, params_out, params); });
  }
  size_t updates_run() const { return run_; }

 private:
  struct Mark final : TimingEvent {
    explicit Mark(size_t n) : updates(n) {}
    size_t updates;  // how many updates were queued aside before this point
  };
  bool aside_ = false;
  std::vector<std::function<void()>> queued_;
  size_t run_ = 0;
};

// Each step's update queued aside and run as late as waiting allows trains exactly as updates in order: every
// reader of a unit waits for its update.
TEST(Trainer, UpdatesRunAsideAsLateAsAllowedTrainAsInOrder) {
  for (const char* model : {"gpt2-tiny", "llama-tiny"}) {
    TrainingOptions options = tiny_options(model);
    options.grad_clip = 0.05f;  // every step clips: the factor of the update's own step must be the one applied
    std::vector<float> in_order, aside;
    LateAsideBackend late;
    const auto expected = losses_of(options, 4, &in_order);
    EXPECT_EQ(losses_of(options, 4, &aside, nullptr, &late), expected) << model;
    EXPECT_EQ(aside, in_order) << model;
    EXPECT_GT(late.updates_run(), 0u) << model << ": the updates went aside";
  }
}

TEST(Trainer, LossesDoNotDependOnTheThreadCount) {
  const TrainingOptions options = tiny_options("llama-tiny");
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = losses_of(options, 3);
  omp_set_num_threads(3);
  const auto three = losses_of(options, 3);
  omp_set_num_threads(threads);
  EXPECT_EQ(one, three);
}

TEST(Trainer, GradientAccumulationEqualsTheLargerBatch) {
  TrainingOptions big = tiny_options("gpt2-tiny", 4), accumulated = tiny_options("gpt2-tiny", 2);
  accumulated.grad_accum = 2;
  std::vector<float> big_params, accumulated_params;
  std::vector<double> big_norms, accumulated_norms;
  const auto a = losses_of(big, 4, &big_params, &big_norms);
  const auto b = losses_of(accumulated, 4, &accumulated_params, &accumulated_norms);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-6 * a[i]) << "loss at step " << i + 1;
    EXPECT_NEAR(big_norms[i], accumulated_norms[i], 1e-6 * big_norms[i]) << "gradient norm at step " << i + 1;
  }
  // Adam divides by sqrt(v), which magnifies the fp32 rounding of a different summation order in the
  // smallest gradients; after four steps of lr 3e-3 the weights still agree to 1e-5 (a wrong update: ~1e-1).
  double diff = 0, norm = 0;
  for (size_t i = 0; i < big_params.size(); ++i) {
    diff += double(big_params[i] - accumulated_params[i]) * (big_params[i] - accumulated_params[i]);
    norm += double(big_params[i]) * big_params[i];
  }
  EXPECT_LE(std::sqrt(diff / norm), 1e-5);
}

TEST(Trainer, OutOfMemoryIsThrownAndEverythingIsReleased) {
  const TrainingOptions options = tiny_options("gpt2-tiny");
  CpuBackend backend;
  TrackingAllocator allocator(std::make_unique<HostMemory>(), size_t(1) << 20);  // 1 MiB: too small
  auto data = make_synthetic_tokens({options.batch, options.seq, 0, 1}, options.model.vocab_size, 1);
  EXPECT_THROW(Trainer(options, backend, allocator, *data), OutOfMemory);
  EXPECT_EQ(allocator.total().current, 0u) << "the failed construction released all it had allocated";
  allocator.set_limit(std::nullopt);
  Trainer trainer(options, backend, allocator, *data);
  EXPECT_GT(trainer.step().loss, 0.0) << "and the process goes on";
}

// A NaN loss stops the step with an error naming it, and the update, clipped on the backend by a factor it
// computed itself, left weights and moments as they were.
TEST(Trainer, ANonFiniteLossThrowsAndLeavesTheStateAsItWas) {
  const TrainingOptions options = tiny_options("gpt2-tiny");
  CpuBackend backend;
  TrackingAllocator allocator(std::make_unique<HostMemory>());
  auto data = make_synthetic_tokens({options.batch, options.seq, 0, 1}, options.model.vocab_size, 1);
  Trainer trainer(options, backend, allocator, *data);
  EXPECT_TRUE(std::isfinite(trainer.step().loss));
  test::plant_nan_weight(backend, trainer.store());
  const auto before = test::optimizer_state(backend, trainer.store());
  try {
    trainer.step();
    FAIL() << "a NaN loss went through";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the loss is nan at step 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(test::optimizer_state(backend, trainer.store()), before);
}

}  // namespace
}  // namespace zb
