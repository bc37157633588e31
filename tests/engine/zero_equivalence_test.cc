// ZeRO stages 0-3 on the CPU backend under mpirun: every stage, world size and gradient accumulation gives
// the losses and final weights of single-process training on the same global batch (each rank also runs
// that reference itself). fp32; relative differences at most 1e-6. Outcome with any number of ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "comm/communicator_factory.h"
#include "comm/mpi_world.h"
#include "core/strings.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/model_registry.h"
#include "support/deferred_aside_backend.h"
#include "support/mpi_test_environment.h"
#include "support/temp_dir.h"
#include "support/tensor_views.h"
#include "support/zero_cases.h"

namespace zb {
namespace {

struct Outcome {
  std::vector<double> losses, grad_norms;
  std::vector<std::vector<float>> params;  // per unit, unpadded
  int64_t speculative_units = 0;
  HostOptimizer::SpeculationCounts speculation;  // over every step (final once the weights are gathered)
};

TrainingOptions base_options(const std::string& model, int64_t grad_accum) {
  TrainingOptions o;
  o.model = resolve_model(model);
  o.batch = 2;
  o.seq = 16;
  o.grad_accum = grad_accum;
  o.optimizer.lr = 1e-3f;
  o.optimizer.weight_decay = 0.1f;
  // As in the golden test: Adam's 1/(sqrt(v) + eps) with eps 1e-8 magnifies the fp32 rounding of a different
  // summation order (ranks add their partial gradients) in the smallest gradients to ~1.2e-6 after three
  // steps (measured, world 3); eps 1e-6 tests the partitioning, not that conditioning. A wrong shard index or
  // a missed reduction moves the weights by 1e-2 or more.
  o.optimizer.eps = 1e-6f;
  o.seed = 7;
  return o;
}

constexpr int kSteps = 3;

// Training with `options` on the ranks of `comm` (nullptr: this process alone, batch as given), on `backend`
// (the CPU backend by default).
Outcome train(const TrainingOptions& options, Communicator* comm, CpuBackend&& backend = CpuBackend()) {
  TrackingAllocator allocator(std::make_unique<HostMemory>());
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->size() : 1;
  auto data = make_synthetic_tokens({options.batch, options.seq, rank, world}, options.model.vocab_size, 99);
  Trainer trainer(options, backend, allocator, *data, comm);
  Outcome run;
  for (int i = 0; i < kSteps; ++i) {
    const StepStats stats = trainer.step();
    run.losses.push_back(stats.loss);
    run.grad_norms.push_back(stats.grad_norm);
  }
  run.params = trainer.gather_parameters();
  run.speculative_units = trainer.speculative_units();
  run.speculation = trainer.speculation_counts();
  return run;
}

// steps_tolerance bounds the losses' and the gradient norms' relative differences.
void expect_equivalent(const Outcome& zero, const Outcome& reference, double weights_tolerance = 1e-6,
                       double steps_tolerance = 1e-6) {
  ASSERT_EQ(zero.losses.size(), reference.losses.size());
  for (size_t i = 0; i < zero.losses.size(); ++i) {
    EXPECT_NEAR(zero.losses[i], reference.losses[i], steps_tolerance * reference.losses[i]) << "loss at step " << i + 1;
    // Adam hardly notices a gradient scaled wrongly (and clipping hides it): the norm does not.
    EXPECT_NEAR(zero.grad_norms[i], reference.grad_norms[i], steps_tolerance * reference.grad_norms[i])
        << "gradient norm at step " << i + 1;
  }
  ASSERT_EQ(zero.params.size(), reference.params.size());
  for (size_t u = 0; u < zero.params.size(); ++u) {
    ASSERT_EQ(zero.params[u].size(), reference.params[u].size());
    EXPECT_LE(test::relative_error(zero.params[u], reference.params[u]), weights_tolerance) << "weights of unit " << u;
  }
}

// The very bits: losses, norms and weights.
void expect_same_bits(const Outcome& outcome, const Outcome& reference) {
  EXPECT_EQ(outcome.losses, reference.losses);
  EXPECT_EQ(outcome.grad_norms, reference.grad_norms);
  ASSERT_EQ(outcome.params.size(), reference.params.size());
  for (size_t u = 0; u < reference.params.size(); ++u) EXPECT_EQ(outcome.params[u], reference.params[u]) << u;
}

using test::ZeroCase;

class ZeroEquivalence : public ::testing::TestWithParam<ZeroCase> {};

TEST_P(ZeroEquivalence, MatchesSingleProcessTraining) {
  const ZeroCase c = GetParam();
  Communicator& comm = test::mpi_communicator();
  TrainingOptions reference = base_options(c.model, c.grad_accum);
  reference.batch *= comm.size();  // the same global batch in one process
  TrainingOptions zero = base_options(c.model, c.grad_accum);
  zero.zero.stage = c.stage;
  zero.zero.reduce_bucket_size = 20'000;  // several buckets per step at these sizes
  zero.zero.allgather_bucket_size = 20'000;
  zero.zero.stage3_param_persistence_threshold = 0;  // partition every unit
  zero.zero.stage3_prefetch_bucket_size = 30'000;
  // The ranks' collectives are compared every step too: a schedule that issued them differently on some rank
  // (or a check that flagged a schedule that does not) stops the run with an Error.
  zero.zero.check_collectives = true;
  // gemma3-tiny's final unit is its final norm's weights alone, which start at zero (the gain is 1 + w): after three
  // steps they are Adam's first updates, where the ranks' order of summation shows at up to 1.6e-6 of their norm
  // (world 3). Its weights are compared within 1e-5: a wrong shard or a missed reduction moves them by 1e-2 or more.
  expect_equivalent(train(zero, &comm), train(reference, nullptr), c.model == "gemma3-tiny" ? 1e-5 : 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroEquivalence, ::testing::ValuesIn(test::every_zero_case(test::cpu_grid_models())),
                         test::zero_case_name);

// Offload (cpu_optimizer: the fp32 master and moments in host memory, updated by the CPU optimizer on its
// own thread while the next forward waits unit by unit; cpu_full: the weights in host memory too) gives the
// training of the same stage without offload.
class OffloadEquivalence : public ::testing::TestWithParam<ZeroCase> {
 protected:
  // The case's stage, every unit partitioned, no offload.
  static TrainingOptions plain_options(const ZeroCase& c) {
    TrainingOptions o = base_options(c.model, c.grad_accum);
    o.zero.stage = c.stage;
    o.zero.stage3_param_persistence_threshold = 0;
    return o;
  }
  static TrainingOptions offloaded(const TrainingOptions& plain, OffloadStrategy strategy,
                                   const std::string& nvme_path = "") {
    TrainingOptions o = plain;
    o.offload = strategy;
    o.nvme_path = nvme_path;
    o.aio = AioConfig{16384, 4, 2, false, true};  // several requests per unit: read-ahead overlaps
    // The host's pace differs between ranks; what each rank issues must not (prefetch, early uploads).
    o.zero.check_collectives = true;
    return o;
  }
  // The same training with `strategy` (its NVMe files, if any, under nvme_path) ends as `plain` does.
  static void expect_offload_matches_plain(const TrainingOptions& plain, OffloadStrategy strategy,
                                           const std::string& nvme_path = "") {
    Communicator& comm = test::mpi_communicator();
    expect_equivalent(train(offloaded(plain, strategy, nvme_path), &comm), train(plain, &comm));
  }
  // Speculation settled before each step (so every unit speculates: copies are synchronous here) ends with
  // the very bits of the same strategy without speculation, having kept or redone every unit's update.
  static void expect_speculation(const TrainingOptions& plain, bool kept) {
    Communicator& comm = test::mpi_communicator();
    const int64_t units = ParameterLayout(plain.model).units().size();
    for (OffloadStrategy strategy : {OffloadStrategy::cpu_optimizer, OffloadStrategy::cpu_full}) {
      SCOPED_TRACE(offload_strategy_name(strategy));
      TrainingOptions without = offloaded(plain, strategy), with = without;
      without.speculative_update = false;
      with.settle_speculation = true;
      const Outcome reference = train(without, &comm), outcome = train(with, &comm);
      EXPECT_EQ(reference.speculative_units, 0);
      EXPECT_EQ(outcome.speculative_units, units) << "the host has the memory for every unit's spare state";
      EXPECT_EQ(outcome.speculation.kept, kept ? kSteps * units : 0);
      EXPECT_EQ(outcome.speculation.discarded, kept ? 0 : kSteps * units);
      expect_same_bits(outcome, reference);
    }
  }
};

TEST_P(OffloadEquivalence, CpuOptimizerMatchesNoOffload) {
  expect_offload_matches_plain(plain_options(GetParam()), OffloadStrategy::cpu_optimizer);
}

TEST_P(OffloadEquivalence, CpuFullMatchesNoOffload) {
  TrainingOptions plain = plain_options(GetParam());
  plain.zero.stage3_prefetch_bucket_size = 30'000;  // prefetching across units whose update may not be done
  expect_offload_matches_plain(plain, OffloadStrategy::cpu_full);
}

// Speculative updates during backward: with clipping off each one is the update, and is kept; with a bound
// so small that every step clips, each is dropped and the unit updated again. (Against no offload, the
// tests above cover speculation as thread timing lets it happen.)
TEST_P(OffloadEquivalence, SpeculativeUpdatesAreKeptWithoutClipping) {
  TrainingOptions plain = plain_options(GetParam());
  plain.grad_clip = 0;
  expect_speculation(plain, /*kept=*/true);
}

TEST_P(OffloadEquivalence, SpeculativeUpdatesAreRedoneWhenTheStepClips) {
  TrainingOptions plain = plain_options(GetParam());
  plain.grad_clip = 1e-3f;  // far below these models' gradient norms
  expect_speculation(plain, /*kept=*/false);
}

// An offload ratio below 1: the first units' state stays on the device (here the CPU backend's) and updates
// there, the rest on the host, and the training is still that of no offload; only the host's units speculate.
// In stage 3 the smallest of the device's units stays whole (persistent), so a unit both whole and updated on
// the device as a shard is gathered after the update.
TEST_P(OffloadEquivalence, PartialOffloadMatchesNoOffload) {
  TrainingOptions plain = plain_options(GetParam());
  Communicator& comm = test::mpi_communicator();
  const ParameterLayout layout(plain.model);
  const ShardGeometry geometry{plain.zero.stage, comm.rank(), comm.size(), 0, true, false, 0.5};
  const std::vector<bool> on_host = ParameterStore::host_optimizer_units(layout, geometry);
  const int64_t host_units = std::count(on_host.begin(), on_host.end(), true);
  ASSERT_GT(host_units, 0);
  ASSERT_LT(host_units, int64_t(on_host.size())) << "some units stay on the device";
  int64_t smallest_on_device = std::numeric_limits<int64_t>::max(), largest = 0;
  for (size_t u = 0; u < on_host.size(); ++u) {
    if (!on_host[u]) smallest_on_device = std::min(smallest_on_device, layout.unit(u).numel);
    largest = std::max(largest, layout.unit(u).numel);
  }
  plain.zero.stage3_param_persistence_threshold = smallest_on_device + 1;
  ASSERT_GT(largest, plain.zero.stage3_param_persistence_threshold) << "not every unit is persistent";
  const Outcome reference = train(plain, &comm);
  test::TempDir dir;
  for (OffloadStrategy strategy : {OffloadStrategy::cpu_optimizer, OffloadStrategy::nvme}) {
    SCOPED_TRACE(offload_strategy_name(strategy));
    TrainingOptions partial = offloaded(plain, strategy, dir.path().string());
    partial.offload_ratio = 0.5;
    const Outcome outcome = train(partial, &comm);
    expect_equivalent(outcome, reference);
    EXPECT_EQ(outcome.speculative_units, strategy == OffloadStrategy::nvme ? 0 : host_units);
  }
}

// nvme: the same state in a file per rank, streamed through the CPU optimizer in small requests (several per
// unit, so the read-ahead and write-behind overlap).
TEST_P(OffloadEquivalence, NvmeMatchesNoOffload) {
  test::TempDir dir;
  expect_offload_matches_plain(plain_options(GetParam()), OffloadStrategy::nvme, dir.path().string());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "the rank's file is removed when training ends";
}

// 8-bit moments (adamw8bit): shards start on quantization blocks, so each rank's blocks are those of stage 0
// on the same ranks, and stochastic rounding draws by an element's place in its unit, not in a shard: every
// stage trains as stage 0 does (stages 1 and 2 to its bits here; stage 3's reductions add in another order, and
// the stochastic rounding of a few moments goes the other way: 1.2e-5 of the weights at most, measured on 2
// and 3 ranks), and every strategy as no offload (the CPU optimizer runs the CPU backend's block update; its clipping
// factor, computed on the host, may differ in its last bit). A rank numbering its elements 4 off moves the
// weights by 1.4e-3 or more (measured): the bound of 1e-4 catches it.
// The speculative update, kept when the step does not clip and redone when it does, ends with the bits of the
// update without speculation. And the 8-bit training is not fp32's.
TEST_P(OffloadEquivalence, EightBitMomentsTrainAlikeOnEveryStageAndStrategy) {
  constexpr double kTolerance = 1e-4;
  Communicator& comm = test::mpi_communicator();
  TrainingOptions plain = plain_options(GetParam());
  set_optimizer(plain.optimizer, "adamw8bit");
  TrainingOptions stage0 = plain, fp32_moments = plain;
  stage0.zero.stage = 0;
  fp32_moments.optimizer.moments_8bit = false;
  // The steps after weights that 8-bit rounding moved by up to kTolerance can differ by more than 1e-6: gemma3-tiny's
  // gradient norm by 1.5e-6 at its third step in stage 3 (two ranks, accumulating). The other models keep 1e-6.
  const double step_tolerance = GetParam().model == "gemma3-tiny" ? 1e-5 : 1e-6;
  const Outcome reference = train(stage0, &comm), same_stage = train(plain, &comm);
  expect_equivalent(same_stage, reference, kTolerance, step_tolerance);
  EXPECT_GT(test::relative_error(train(fp32_moments, &comm).params[0], reference.params[0]), 1e-3)
      << "the moments were not quantized";
  test::TempDir dir;
  for (OffloadStrategy strategy : {OffloadStrategy::cpu_optimizer, OffloadStrategy::cpu_full, OffloadStrategy::nvme}) {
    SCOPED_TRACE(offload_strategy_name(strategy));
    expect_equivalent(train(offloaded(plain, strategy, dir.path().string()), &comm), same_stage, kTolerance,
                      step_tolerance);
  }
  const int64_t units = ParameterLayout(plain.model).units().size();
  for (const float clip : {0.0f, 1e-3f}) {  // no step clips; every step clips
    SCOPED_TRACE(cat("clipping at ", clip));
    TrainingOptions without = offloaded(plain, OffloadStrategy::cpu_optimizer), with = without;
    without.grad_clip = with.grad_clip = clip;
    without.speculative_update = false;
    with.settle_speculation = true;
    const Outcome outcome = train(with, &comm);
    expect_same_bits(outcome, train(without, &comm));
    EXPECT_EQ(outcome.speculation.kept, clip == 0 ? kSteps * units : 0);
    EXPECT_EQ(outcome.speculation.discarded, clip == 0 ? 0 : kSteps * units);
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, OffloadEquivalence,
                         ::testing::ValuesIn(test::every_stage_once(test::cpu_grid_models())),
                         test::zero_case_name);

// Activation checkpointing recomputes what it did not keep with the same kernels on the same inputs: every
// stage and offload strategy trains with it to the very bits it trains to without it (stage 3 and cpu_full
// gather or upload each block's weights for its backward, which the recompute reads first).
class CheckpointingEquivalence : public ::testing::TestWithParam<ZeroCase> {};

TEST_P(CheckpointingEquivalence, EveryModeTrainsAsWithoutIt) {
  const ZeroCase c = GetParam();
  Communicator& comm = test::mpi_communicator();
  for (OffloadStrategy strategy : {OffloadStrategy::none, OffloadStrategy::cpu_optimizer, OffloadStrategy::cpu_full}) {
    TrainingOptions plain = base_options(c.model, c.grad_accum);
    plain.model.n_layer = 4;  // (two tiny layers would recompute only the first block, after none other)
    plain.zero.stage = c.stage;
    plain.zero.stage3_param_persistence_threshold = 0;
    plain.zero.check_collectives = true;
    plain.offload = strategy;
    const Outcome reference = train(plain, &comm);
    for (ActivationCheckpointing mode : {ActivationCheckpointing::full, ActivationCheckpointing::selective}) {
      SCOPED_TRACE(cat(offload_strategy_name(strategy), ", ", activation_checkpointing_name(mode), " checkpointing"));
      TrainingOptions checkpointed = plain;
      checkpointed.activation_checkpointing = mode;
      expect_same_bits(train(checkpointed, &comm), reference);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, CheckpointingEquivalence,
                         ::testing::ValuesIn(test::every_stage_once(test::cpu_grid_models())),
                         test::zero_case_name);

// LoRA: the base model frozen, its adapters trained. Every stage, on any number of ranks and with every offload
// strategy (nvme's file holds the adapters' state alone), trains the adapters as one process does on the same global batch (stage 3 gathers the frozen
// weights too; nothing reduces, updates or gathers them after the update), and leaves the base weights with
// their initial bits.
class LoraEquivalence : public ::testing::TestWithParam<ZeroCase> {};

TEST_P(LoraEquivalence, AdaptersTrainAsOneProcessAndTheBaseStaysAsItWas) {
  const ZeroCase c = GetParam();
  Communicator& comm = test::mpi_communicator();
  auto with_lora = [](TrainingOptions o) {
    o.model.lora = {2, 4.0, LoraTargets::all};
    return o;
  };
  TrainingOptions reference = with_lora(base_options(c.model, c.grad_accum));
  reference.batch *= comm.size();
  const Outcome expected = train(reference, nullptr);
  const ParameterLayout layout(reference.model);
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const std::vector<float> initial = initial_unit_values(layout, u, reference.seed, 0, layout.unit(u).numel);
    if (layout.unit(u).trainable) {
      EXPECT_GT(test::relative_error(expected.params[u], initial), 1e-4) << layout.unit(u).name << " was not trained";
    } else {
      EXPECT_EQ(expected.params[u], initial) << layout.unit(u).name << " is frozen";
    }
  }
  test::TempDir dir;
  for (OffloadStrategy strategy :
       {OffloadStrategy::none, OffloadStrategy::cpu_optimizer, OffloadStrategy::cpu_full, OffloadStrategy::nvme}) {
    SCOPED_TRACE(offload_strategy_name(strategy));
    TrainingOptions zero = with_lora(base_options(c.model, c.grad_accum));
    zero.nvme_path = dir.path().string();
    zero.zero.stage = c.stage;
    zero.zero.reduce_bucket_size = 2'000;  // several buckets of adapters
    zero.zero.allgather_bucket_size = 2'000;
    zero.zero.stage3_param_persistence_threshold = 0;
    zero.zero.stage3_prefetch_bucket_size = 30'000;
    zero.zero.check_collectives = true;
    zero.offload = strategy;
    expect_equivalent(train(zero, &comm), expected);
  }
}

// With dropout on the adapters' input each rank draws its own masks, the same in every stage: stages 1-3 (and
// every strategy) train as stage 0 on the same ranks; and the masks matter (dropout 0 trains otherwise).
TEST_P(LoraEquivalence, DropoutDrawsTheSameMasksInEveryStage) {
  const ZeroCase c = GetParam();
  Communicator& comm = test::mpi_communicator();
  TrainingOptions plain = base_options(c.model, c.grad_accum);
  plain.model.lora = {2, 4.0, LoraTargets::all, 0.25};
  plain.zero.stage3_param_persistence_threshold = 0;
  plain.zero.check_collectives = true;
  const Outcome stage0 = train(plain, &comm);
  TrainingOptions without = plain;
  without.model.lora.dropout = 0;
  const size_t first_adapters = ParameterLayout(plain.model).adapter_unit(0);
  EXPECT_GT(test::relative_error(train(without, &comm).params[first_adapters], stage0.params[first_adapters]), 1e-4)
      << "the masks were not applied";
  for (OffloadStrategy strategy : {OffloadStrategy::none, OffloadStrategy::cpu_optimizer}) {
    SCOPED_TRACE(offload_strategy_name(strategy));
    TrainingOptions staged = plain;
    staged.zero.stage = c.stage;
    staged.offload = strategy;
    expect_equivalent(train(staged, &comm), stage0);
  }
  // A recompute draws the forward's masks again: checkpointing trains to the same bits.
  TrainingOptions staged = plain;
  staged.zero.stage = c.stage;
  staged.model.n_layer = 4;  // (two tiny layers would recompute only the first block)
  const Outcome reference = train(staged, &comm);
  for (ActivationCheckpointing mode : {ActivationCheckpointing::full, ActivationCheckpointing::selective}) {
    SCOPED_TRACE(activation_checkpointing_name(mode));
    TrainingOptions checkpointed = staged;
    checkpointed.activation_checkpointing = mode;
    expect_same_bits(train(checkpointed, &comm), reference);
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, LoraEquivalence, ::testing::ValuesIn(test::every_stage_once(test::cpu_grid_models())),
                         test::zero_case_name);

// Loss scaling multiplies the loss's gradient by a power of two and the update divides it out: in fp32, where
// nothing overflows, every product and sum of the backward scales exactly, so every stage and strategy (nvme's
// update, read from its file and written back, included) trains with a scale of 2^16 to the very bits it
// trains to without one.
class LossScalingEquivalence : public ::testing::TestWithParam<ZeroCase> {
 protected:
  TrainingOptions plain_options(const ZeroCase& c, OffloadStrategy strategy) const {
    TrainingOptions o = base_options(c.model, c.grad_accum);
    o.zero.stage = c.stage;
    o.zero.stage3_param_persistence_threshold = 0;
    o.zero.check_collectives = true;
    o.offload = strategy;
    o.nvme_path = nvme_dir_.path().string();  // (nvme's: a file per rank, removed at the end)
    return o;
  }
  // With dynamic loss scaling that halves the scale at the first overflow.
  TrainingOptions scaled_options(const ZeroCase& c, OffloadStrategy strategy) const {
    TrainingOptions o = plain_options(c, strategy);
    o.loss_scaling.enabled = true;
    o.loss_scaling.hysteresis = 1;
    return o;
  }
  static constexpr OffloadStrategy kStrategies[] = {OffloadStrategy::none, OffloadStrategy::cpu_optimizer,
                                                   OffloadStrategy::cpu_full, OffloadStrategy::nvme};
  test::TempDir nvme_dir_;
};

TEST_P(LossScalingEquivalence, AScaleTrainsAsNone) {
  Communicator& comm = test::mpi_communicator();
  for (OffloadStrategy strategy : kStrategies) {
    SCOPED_TRACE(offload_strategy_name(strategy));
    const Outcome reference = train(plain_options(GetParam(), strategy), &comm);
    const Outcome outcome = train(scaled_options(GetParam(), strategy), &comm);
    EXPECT_EQ(outcome.losses, reference.losses);
    EXPECT_EQ(outcome.grad_norms, reference.grad_norms);
    for (size_t u = 0; u < reference.params.size(); ++u) EXPECT_EQ(outcome.params[u], reference.params[u]) << u;
  }
}

// An overflow on one rank (its loss gradient scaled by infinity in step 2) skips step 2 on every rank: the
// weights after it are those after step 1, the steps around it change them, and the scale halves.
TEST_P(LossScalingEquivalence, AnOverflowSkipsExactlyThatStepOnEveryRank) {
  Communicator& comm = test::mpi_communicator();
  for (OffloadStrategy strategy : kStrategies) {
    SCOPED_TRACE(offload_strategy_name(strategy));
    TrainingOptions options = scaled_options(GetParam(), strategy);
    options.inject_overflow_step = 2;
    options.inject_overflow_rank = comm.size() - 1;
    options.settle_speculation = true;  // every unit speculates: the skip must drop that work
    options.grad_clip = 0;              // (and no clipping drops it in the other steps)
    TrackingAllocator allocator(std::make_unique<HostMemory>());
    auto data = make_synthetic_tokens({options.batch, options.seq, comm.rank(), comm.size()},
                                      options.model.vocab_size, 99);
    CpuBackend backend;
    Trainer trainer(options, backend, allocator, *data, &comm);
    std::vector<std::vector<std::vector<float>>> weights{trainer.gather_parameters()};
    std::vector<StepStats> stats;
    for (int i = 0; i < 3; ++i) {
      stats.push_back(trainer.step());
      weights.push_back(trainer.gather_parameters());
    }
    EXPECT_FALSE(stats[0].skipped);
    EXPECT_TRUE(stats[1].skipped);
    EXPECT_FALSE(stats[2].skipped);
    EXPECT_FALSE(std::isfinite(stats[1].grad_norm));
    EXPECT_TRUE(std::isfinite(stats[1].loss)) << "the forward did not overflow";
    EXPECT_EQ(stats[0].loss_scale, 65536.0f);
    EXPECT_EQ(stats[1].loss_scale, 65536.0f);
    EXPECT_EQ(stats[2].loss_scale, 32768.0f);
    EXPECT_EQ(trainer.skipped_steps(), 1);
    if (trainer.speculative_units() > 0) {
      EXPECT_EQ(trainer.speculation_counts().discarded, trainer.speculative_units()) << "only step 2's was dropped";
      EXPECT_EQ(trainer.speculation_counts().kept, 2 * trainer.speculative_units());
    }
    EXPECT_EQ(weights[2], weights[1]) << "step 2 changed the weights";
    EXPECT_NE(weights[1], weights[0]);
    EXPECT_NE(weights[3], weights[2]);
  }
}

// The gradients carry the scale, and the update divides it out: a static scale of 3, which (unlike a power of
// two) changes how the backward's products round, trains to other bits than no scale, within fp32 rounding of
// them. (A scaler that neither applied nor undid its scale would give the very bits.)
TEST_P(LossScalingEquivalence, ANonPowerOfTwoScaleChangesOnlyTheRounding) {
  Communicator& comm = test::mpi_communicator();
  const Outcome reference = train(plain_options(GetParam(), OffloadStrategy::none), &comm);
  TrainingOptions three = scaled_options(GetParam(), OffloadStrategy::none);
  three.loss_scaling.static_scale = 3;
  const Outcome outcome = train(three, &comm);
  EXPECT_NE(outcome.params, reference.params) << "the scale was not applied";
  // (The gradient norms agree to 1e-6: a scale not undone would show in them threefold. Adam, which hardly
  // notices a scale, carries the rounding differences of llama-tiny's embedding to 1.3e-6 in its weights.)
  expect_equivalent(outcome, reference, 1e-5);
}

// The same batch every step: a skipped first step then leaves a run one update behind a run without it.
class RepeatedBatch final : public TokenSource {
 public:
  explicit RepeatedBatch(TokenBatch batch) : batch_(std::move(batch)) {}
  TokenBatch next_batch() override { return batch_; }
  std::string describe() const override { return "one batch, repeated"; }

 private:
  TokenBatch batch_;
};

// Adam counts the updates applied: after a skipped first step, the second applies Adam's first update (its
// bias correction included), ending where one step of the same batch without the overflow ends.
TEST_P(LossScalingEquivalence, ASkippedStepIsNotCountedByAdam) {
  Communicator& comm = test::mpi_communicator();
  for (OffloadStrategy strategy : kStrategies) {
    SCOPED_TRACE(offload_strategy_name(strategy));
    const TrainingOptions options = scaled_options(GetParam(), strategy);
    const TokenBatch batch = make_synthetic_tokens({options.batch, options.seq, comm.rank(), comm.size()},
                                                   options.model.vocab_size, 99)
                                 ->next_batch();
    auto weights_after = [&](const TrainingOptions& o, int steps) {
      TrackingAllocator allocator(std::make_unique<HostMemory>());
      RepeatedBatch data(batch);
      CpuBackend backend;
      Trainer trainer(o, backend, allocator, data, &comm);
      for (int i = 0; i < steps; ++i) trainer.step();
      return trainer.gather_parameters();
    };
    TrainingOptions overflowing = options;
    overflowing.inject_overflow_step = 1;
    // (The scale halved after the overflow: in fp32 a power of two changes no bit of the result.)
    EXPECT_EQ(weights_after(overflowing, 2), weights_after(options, 1));
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, LossScalingEquivalence,
                         ::testing::ValuesIn(test::every_stage_once(test::cpu_grid_models())),
                         test::zero_case_name);

// The other knobs: stage 3 with persistent (whole) small units, no prefetch and no overlap; stages 0-1 with
// one bucket for everything and overlap off.
TEST(ZeroKnobs, PersistentUnitsNoPrefetchNoOverlap) {
  Communicator& comm = test::mpi_communicator();
  TrainingOptions reference = base_options("gpt2-tiny", 2);
  reference.batch *= comm.size();
  TrainingOptions zero = base_options("gpt2-tiny", 2);
  zero.zero.stage = 3;
  zero.zero.stage3_param_persistence_threshold = 10'000;  // the final norm stays whole, the blocks do not
  zero.zero.stage3_prefetch_bucket_size = 0;
  zero.zero.overlap_comm = false;
  const ParameterLayout layout(zero.model);
  ASSERT_LT(layout.unit(layout.final_unit()).numel, 10'000);
  ASSERT_GT(layout.unit(layout.block_unit(0)).numel, 10'000);
  expect_equivalent(train(zero, &comm), train(reference, nullptr));
}

TEST(ZeroKnobs, OneBucketWithoutOverlap) {
  Communicator& comm = test::mpi_communicator();
  TrainingOptions reference = base_options("llama-tiny", 1);
  reference.batch *= comm.size();
  for (int stage : {0, 1}) {
    TrainingOptions zero = base_options("llama-tiny", 1);
    zero.zero.stage = stage;
    zero.zero.overlap_comm = false;
    SCOPED_TRACE(testing::Message() << "stage " << stage);
    expect_equivalent(train(zero, &comm), train(reference, nullptr));
  }
}

// Pipelined updates: every stage's update queued aside (held until the main sequence waits for it, see
// DeferredAsideCpuBackend), each unit's gather issued when a pass needs the unit. A gather that read its
// shard before the update wrote it, or a unit left ungathered, trains a different model.
TEST(ZeroKnobs, PipelinedUpdatesGatherEachUnitAfterItsOwnUpdate) {
  Communicator& comm = test::mpi_communicator();
  for (const char* model : {"gpt2-tiny", "llama-tiny"}) {
    TrainingOptions reference = base_options(model, 2);
    reference.batch *= comm.size();
    const Outcome expected = train(reference, nullptr);
    for (int stage : {0, 1, 2, 3}) {
      TrainingOptions zero = base_options(model, 2);
      zero.zero.stage = stage;
      zero.zero.pipelined_updates = true;
      zero.zero.check_collectives = true;        // the lazily issued gathers in the same order on every rank
      zero.zero.allgather_bucket_size = 20'000;  // prefetch a unit or two ahead
      zero.zero.stage3_param_persistence_threshold = 10'000;  // stage 3: the final norm stays whole
      SCOPED_TRACE(testing::Message() << model << ", stage " << stage);
      expect_equivalent(train(zero, &comm, test::DeferredAsideCpuBackend()), expected);
    }
  }
}

// Without pipelining, the sharded stages' updates stay in order (nothing is held aside) and train the same.
TEST(ZeroKnobs, ShardedUpdatesStayInOrderWithoutPipelining) {
  Communicator& comm = test::mpi_communicator();
  TrainingOptions zero = base_options("gpt2-tiny", 1);
  zero.zero.stage = 2;
  TrackingAllocator allocator(std::make_unique<HostMemory>());
  auto data = make_synthetic_tokens({zero.batch, zero.seq, comm.rank(), comm.size()}, zero.model.vocab_size, 99);
  test::DeferredAsideCpuBackend backend;
  Trainer trainer(zero, backend, allocator, *data, &comm);
  for (int i = 0; i < 2; ++i) trainer.step();
  EXPECT_EQ(backend.held(), 0u);
  zero.zero.pipelined_updates = true;
  Trainer pipelined(zero, backend, allocator, *data, &comm);
  for (int i = 0; i < 2; ++i) pipelined.step();
  EXPECT_GT(backend.held(), 0u) << "pipelined: the updates go aside";
}

}  // namespace
}  // namespace zb
