// Whole training steps on the GPU against the CPU reference: one forward/backward of each tiny model (fp32
// and bf16), ten fp32 optimizer steps of GPT-2 (losses to 1e-4), bit-identical repeated runs with our attention
// kernels, cuDNN's attention training as ours does, and an out-of-memory failure the process survives.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "engine/trainer.h"
#include "models/model_registry.h"
#include "support/cuda_fixture.h"
#include "support/trainer_state.h"

namespace zb {
namespace {

using test::relative_error;

struct GradientCase {
  const char* model;
  DType dtype;
  double loss_tolerance, gradient_tolerance;
};

class CudaStep : public ::testing::TestWithParam<GradientCase>, protected test::CudaFixture {
 protected:
  void SetUp() override {
    if (!start()) GTEST_SKIP() << "no CUDA GPU";
  }
};

// The same weights (same seed) and tokens on both backends; compares the loss and every unit's gradient.
TEST_P(CudaStep, ForwardBackwardMatchesTheCpu) {
  const GradientCase c = GetParam();
  const TransformerConfig config = resolve_model(c.model);
  const ParameterLayout layout(config);
  const int64_t batch = 4, seq = 48;  // (gemma3-tiny's local layer bands: its window is 8)
  const TokenBatch tokens = make_synthetic_tokens({batch, seq, 0, 1}, config.vocab_size, 5)->next_batch();

  TrackingAllocator host(std::make_unique<HostMemory>());
  ParameterStore cpu_store(layout, host, DType::f32, OptimizerStateFormat{});
  cpu_store.initialize(cpu, 17);
  Transformer cpu_model(layout, cpu, host, DType::f32, batch, seq);
  cpu_model.bind_parameters(bind_model_tensors(layout, cpu_store.all_params()));
  cpu_model.bind_gradients(bind_model_tensors(layout, cpu_store.all_grads()));
  const double cpu_loss = cpu_model.forward_backward(test::view(tokens.inputs), test::view(tokens.targets));

  ParameterStore gpu_store(layout, *allocator, c.dtype, OptimizerStateFormat{});
  gpu_store.initialize(*gpu, 17);
  Transformer gpu_model(layout, *gpu, *allocator, c.dtype, batch, seq);
  gpu_model.bind_parameters(bind_model_tensors(layout, gpu_store.all_params()));
  gpu_model.bind_gradients(bind_model_tensors(layout, gpu_store.all_grads()));
  const double gpu_loss = gpu_model.forward_backward(upload_ids(tokens.inputs), upload_ids(tokens.targets));

  EXPECT_LE(std::abs(gpu_loss - cpu_loss) / cpu_loss, c.loss_tolerance) << cpu_loss << " vs " << gpu_loss;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const Tensor g = cpu_store.grads(u);
    const std::vector<float> expected(g.as<float>(), g.as<float>() + g.numel());
    const double error = relative_error(download(gpu_store.grads(u)), expected);
    EXPECT_LE(error, c.gradient_tolerance) << "gradient of " << layout.unit(u).name;
    RecordProperty("gradient_error_" + layout.unit(u).name, std::to_string(error));
  }
}

// bf16: the loss within the bf16 op bound; gradients pass through every layer's bf16 rounding, so their
// bound is the op bound times the number of rounded stages a gradient crosses (about 2.5 per layer). fp16 the
// same with its op bound (5e-3: 3 more mantissa bits). No loss scale here: the gradients of one pass are
// compared as they are.
INSTANTIATE_TEST_SUITE_P(TinyModels, CudaStep,
                         ::testing::Values(GradientCase{"gpt2-tiny", DType::f32, 1e-5, 1e-5},
                                           GradientCase{"llama-tiny", DType::f32, 1e-5, 1e-5},
                                           GradientCase{"gpt2-tiny", DType::bf16, 2e-2, 5e-2},
                                           GradientCase{"llama-tiny", DType::bf16, 2e-2, 5e-2},
                                           GradientCase{"gpt2-tiny", DType::f16, 5e-3, 1.25e-2},
                                           GradientCase{"llama-tiny", DType::f16, 5e-3, 1.25e-2},
                                           GradientCase{"gemma3-tiny", DType::f32, 1e-5, 1e-5},
                                           GradientCase{"gemma3-tiny", DType::bf16, 2e-2, 5e-2}),
                         [](const auto& param_info) {
                           std::string name = std::string(param_info.param.model) + "_" +
                                              std::string(dtype_name(param_info.param.dtype));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

class CudaTraining : public ::testing::Test, protected test::CudaFixture {
 protected:
  void SetUp() override {
    if (!start()) GTEST_SKIP() << "no CUDA GPU";
  }

  std::vector<double> losses(Backend& backend, TrackingAllocator& memory, const TrainingOptions& options, int steps) {
    auto data = make_synthetic_tokens({options.batch, options.seq, 0, 1}, options.model.vocab_size, options.seed);
    Trainer trainer(options, backend, memory, *data);
    std::vector<double> out;
    for (int i = 0; i < steps; ++i) out.push_back(trainer.step().loss);
    return out;
  }
};

TEST_F(CudaTraining, TenFp32StepsOfGpt2MatchTheCpu) {
  TrainingOptions options;
  options.model = resolve_model("gpt2");
  options.batch = 2;
  options.seq = 64;
  options.optimizer.lr = 1e-3f;
  options.optimizer.weight_decay = 0.01f;
  TrackingAllocator host(std::make_unique<HostMemory>());
  const auto on_cpu = losses(cpu, host, options, 10);
  options.dtype = DType::f32;
  const auto on_gpu = losses(*gpu, *allocator, options, 10);
  for (size_t i = 0; i < on_cpu.size(); ++i)
    EXPECT_LE(std::abs(on_gpu[i] - on_cpu[i]) / on_cpu[i], 1e-4)
        << "step " << i + 1 << ": " << on_cpu[i] << " vs " << on_gpu[i];
}

// LoRA with dropout on the adapters' input: the GPU draws the CPU's masks (the same Philox elements), so fp32
// training follows the CPU's losses as plain training does, step after step (a new mask each pass, no pass
// replayed); and the masks matter: without dropout the losses differ by more than that bound.
TEST_F(CudaTraining, LoraDropoutTrainsAsOnTheCpu) {
  TrainingOptions options;
  options.model = resolve_model("llama-tiny");
  options.model.lora = {4, 8.0, LoraTargets::all, 0.25};
  options.batch = 2;
  options.seq = 64;
  options.optimizer.lr = 1e-2f;
  TrackingAllocator host(std::make_unique<HostMemory>());
  const auto on_cpu = losses(cpu, host, options, 6);
  options.dtype = DType::f32;
  const auto on_gpu = losses(*gpu, *allocator, options, 6);
  options.model.lora.dropout = 0;
  const auto without = losses(*gpu, *allocator, options, 6);
  double largest_change = 0;
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    EXPECT_LE(std::abs(on_gpu[i] - on_cpu[i]) / on_cpu[i], 1e-4)
        << "step " << i + 1 << ": " << on_cpu[i] << " vs " << on_gpu[i];
    largest_change = std::max(largest_change, std::abs(without[i] - on_gpu[i]) / on_gpu[i]);
  }
  EXPECT_GT(largest_change, 1e-3) << "dropout did not change the losses";
}

TrainingOptions bf16_gpt2() {
  TrainingOptions options;
  options.model = resolve_model("gpt2");  // head size 64: the flash-attention kernels
  options.batch = 2;
  options.seq = 256;
  options.dtype = DType::bf16;
  return options;
}

// With the default fused GELU epilogue: full checkpointing recomputes with the same fused GEMM, bit for bit;
// selective applies GELU to the stored bf16 product where the epilogue applied it before rounding, so its
// losses follow within bf16 rounding (the multi-GPU test shows it exact with GELU after the GEMM).
TEST_F(CudaTraining, CheckpointingWithTheFusedGeluEpilogue) {
  use(&BackendOptions::attention, AttentionKernels::own);
  use(&BackendOptions::gemm_epilogues, GemmEpilogues::fused);
  TrainingOptions options = bf16_gpt2();
  const auto none = losses(*gpu, *allocator, options, 3);
  options.activation_checkpointing = ActivationCheckpointing::full;
  EXPECT_EQ(losses(*gpu, *allocator, options, 3), none);
  options.activation_checkpointing = ActivationCheckpointing::selective;
  const auto selective = losses(*gpu, *allocator, options, 3);
  for (size_t i = 0; i < none.size(); ++i) EXPECT_NEAR(selective[i], none[i], 1e-2 * none[i]) << "step " << i + 1;
}

// fp16 training follows fp32's loss curve as bf16's does: over 10 steps of gpt2 (a static loss scale of 1024,
// so that no step is skipped and the runs stay step for step comparable), each loss within 1% of the fp32
// run's. bf16 must meet the same bound, which shows that the bound is about 16-bit rounding, not slack; fp16
// keeps 3 more mantissa bits than bf16, so its gap is expected to be the smaller. A dynamic scale starting at
// 2^16 (hysteresis 1) trains as well, its skipped steps (if gpt2's gradients overflow there) counted and its
// scale halved for each.
TEST_F(CudaTraining, Fp16FollowsTheFp32LossCurveAsBf16Does) {
  TrainingOptions options = bf16_gpt2();
  options.optimizer.lr = 1e-3f;
  options.dtype = DType::f32;
  const auto fp32 = losses(*gpu, *allocator, options, 10);
  options.dtype = DType::bf16;
  const auto bf16 = losses(*gpu, *allocator, options, 10);
  options.dtype = DType::f16;
  options.loss_scaling.enabled = true;
  options.loss_scaling.static_scale = 1024;
  std::vector<double> fp16;
  {
    auto data = make_synthetic_tokens({options.batch, options.seq, 0, 1}, options.model.vocab_size, options.seed);
    Trainer trainer(options, *gpu, *allocator, *data);
    for (int i = 0; i < 10; ++i) fp16.push_back(trainer.step().loss);
    ASSERT_EQ(trainer.skipped_steps(), 0) << "no step skipped at a scale of 1024: the runs compare step by step";
  }
  double bf16_gap = 0, fp16_gap = 0;
  for (size_t i = 0; i < fp32.size(); ++i) {
    bf16_gap = std::max(bf16_gap, std::abs(bf16[i] - fp32[i]) / fp32[i]);
    fp16_gap = std::max(fp16_gap, std::abs(fp16[i] - fp32[i]) / fp32[i]);
  }
  std::printf("largest gap to fp32 over 10 steps: bf16 %.2e, fp16 %.2e\n", bf16_gap, fp16_gap);
  EXPECT_LE(bf16_gap, 1e-2);
  EXPECT_LE(fp16_gap, 1e-2);
  EXPECT_LT(fp16.back(), fp16.front()) << "and the run trains";

  options.loss_scaling.static_scale = 0;
  options.loss_scaling.hysteresis = 1;
  auto data = make_synthetic_tokens({options.batch, options.seq, 0, 1}, options.model.vocab_size, options.seed);
  Trainer trainer(options, *gpu, *allocator, *data);
  float scale = 65536.0f;
  int64_t skipped = 0;
  for (int i = 0; i < 10; ++i) {
    const StepStats s = trainer.step();
    EXPECT_EQ(s.loss_scale, scale) << "step " << i + 1;
    if (s.skipped) {
      ++skipped;
      scale /= 2;
    }
    EXPECT_TRUE(std::isfinite(s.loss));
  }
  EXPECT_EQ(trainer.skipped_steps(), skipped);
}

// With our attention kernels every reduction has a fixed order (cuDNN's backward adds dQ with atomics).
TEST_F(CudaTraining, RepeatedBf16RunsWithOurAttentionAreBitIdentical) {
  use(&BackendOptions::attention, AttentionKernels::own);
  const auto first = losses(*gpu, *allocator, bf16_gpt2(), 3);
  EXPECT_EQ(losses(*gpu, *allocator, bf16_gpt2(), 3), first);
  EXPECT_LT(first.back(), first.front() + 0.5) << "and the run trains";
  EXPECT_EQ(gpu->attention_use().cudnn_backward, 0);
}

#ifdef ZB_HAVE_CUDNN
// The default, cuDNN's fused attention, trains as ours does: the same losses up to bf16 rounding.
TEST_F(CudaTraining, CudnnAttentionTrainsAsOursDoes) {
  use(&BackendOptions::attention, AttentionKernels::own);
  const auto ours = losses(*gpu, *allocator, bf16_gpt2(), 5);
  use(&BackendOptions::attention, AttentionKernels::cudnn);
  const auto theirs = losses(*gpu, *allocator, bf16_gpt2(), 5);
  ASSERT_GT(gpu->attention_use().cudnn_backward, 0) << gpu->attention_use().why_not_cudnn;
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_NEAR(theirs[i], ours[i], 5e-3 * ours[i]) << "step " << i + 1;
  EXPECT_LT(theirs.back(), theirs.front() + 0.5) << "and the run trains";
}
#endif

// Replaying a recorded pass runs the same kernels on the same buffers as queuing it: with our attention kernels
// (every reduction in a fixed order) a replayed run is bit-identical to a queued one. Micro-batches that write
// the gradients and those that add to them are both replayed, each replay is timed on its own marks, and a
// recording made stale by a kernel choice set mid-run is recorded again.
TEST_F(CudaTraining, ReplayedPassesTrainBitIdenticallyToQueuedOnes) {
  use(&BackendOptions::attention, AttentionKernels::own);
  use(&BackendOptions::gemm_algorithms, GemmAlgorithms::heuristic);
  TrainingOptions options = bf16_gpt2();
  options.grad_accum = 2;
  struct Run {
    std::vector<StepStats> steps;
    std::vector<std::vector<uint8_t>> state;
    std::string replay;
  };
  const auto train = [&](PassRecording recording) {
    use(&BackendOptions::pass_recording, recording);
    auto data = make_synthetic_tokens({options.batch, options.seq, 0, 1}, options.model.vocab_size, 9);
    Trainer trainer(options, *gpu, *allocator, *data);
    Run run;
    for (int i = 0; i < 5; ++i) {
      if (i == 3) use(&BackendOptions::norm_rows, NormRows::teams);  // the default again, but the recordings are stale
      run.steps.push_back(trainer.step());
    }
    run.state = test::optimizer_state(*gpu, trainer.store());
    run.replay = trainer.pass_replay().describe();
    return run;
  };
  const Run queued = train(PassRecording::eager);
  const Run replayed = train(PassRecording::graphs);
  EXPECT_EQ(replayed.replay, "on (2 recorded passes)");
  EXPECT_NE(queued.replay.find("off: "), std::string::npos) << queued.replay;
  for (size_t i = 0; i < queued.steps.size(); ++i) {
    EXPECT_EQ(replayed.steps[i].loss, queued.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(replayed.steps[i].grad_norm, queued.steps[i].grad_norm) << "step " << i + 1;
    EXPECT_GT(replayed.steps[i].forward_ms, 0.0) << "step " << i + 1;
    EXPECT_GT(replayed.steps[i].backward_ms, 0.0) << "step " << i + 1;
  }
  EXPECT_TRUE(replayed.state == queued.state) << "the weights and optimizer state after five steps";
  EXPECT_LT(replayed.steps.back().loss, replayed.steps.front().loss + 0.5) << "and the run trains";
}

#ifdef ZB_HAVE_CUDNN
// cuDNN's attention (the default) records too; its backward adds dQ with atomics, so the runs agree to bf16
// rounding rather than bit for bit.
TEST_F(CudaTraining, ReplayedPassesWithCudnnAttentionTrainAsQueuedOnes) {
  use(&BackendOptions::attention, AttentionKernels::cudnn);
  const auto train = [&](PassRecording recording, std::string& replay) {
    use(&BackendOptions::pass_recording, recording);
    auto data = make_synthetic_tokens({2, 256, 0, 1}, bf16_gpt2().model.vocab_size, 9);
    Trainer trainer(bf16_gpt2(), *gpu, *allocator, *data);
    std::vector<double> losses;
    for (int i = 0; i < 5; ++i) losses.push_back(trainer.step().loss);
    replay = trainer.pass_replay().describe();
    return losses;
  };
  std::string queued_replay, replayed_replay;
  const auto queued = train(PassRecording::eager, queued_replay);
  const auto replayed = train(PassRecording::graphs, replayed_replay);
  EXPECT_EQ(replayed_replay, "on (1 recorded pass)");
  ASSERT_GT(gpu->attention_use().cudnn_backward, 0) << gpu->attention_use().why_not_cudnn;
  for (size_t i = 0; i < queued.size(); ++i) EXPECT_NEAR(replayed[i], queued[i], 5e-3 * queued[i]) << "step " << i + 1;
}
#endif

TEST_F(CudaTraining, OutOfMemoryReleasesEverythingAndTrainingContinues) {
  TrainingOptions options;
  options.model = resolve_model("gpt2-tiny");
  options.dtype = DType::bf16;
  auto data = make_synthetic_tokens({options.batch, options.seq, 0, 1}, options.model.vocab_size, 3);
  const size_t before = allocator->total().current;  // the backend's own workspace
  allocator->set_limit(before + (size_t(1) << 20));
  EXPECT_THROW(Trainer(options, *gpu, *allocator, *data), OutOfMemory);
  EXPECT_EQ(allocator->total().current, before);
  allocator->set_limit(std::nullopt);
  Trainer trainer(options, *gpu, *allocator, *data);
  EXPECT_TRUE(std::isfinite(trainer.step().loss));
}

// The whole step is queued with the clipping factor computed on the GPU: a NaN loss makes that factor NaN, the
// update skips itself, and the host, reading the loss at the end of the step, throws.
TEST_F(CudaTraining, ANonFiniteLossThrowsAndLeavesTheStateAsItWas) {
  TrainingOptions options;
  options.model = resolve_model("gpt2-tiny");
  options.dtype = DType::bf16;
  auto data = make_synthetic_tokens({options.batch, options.seq, 0, 1}, options.model.vocab_size, 3);
  Trainer trainer(options, *gpu, *allocator, *data);
  EXPECT_TRUE(std::isfinite(trainer.step().loss));
  test::plant_nan_weight(*gpu, trainer.store());
  const auto before = test::optimizer_state(*gpu, trainer.store());
  try {
    trainer.step();
    FAIL() << "a NaN loss went through";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the loss is nan at step 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(test::optimizer_state(*gpu, trainer.store()), before);
}

}  // namespace
}  // namespace zb
