// The per-rank bytes the ParameterStore allocates for each ZeRO stage and world size, against the ZeRO
// paper's formulas for mixed-precision Adam (Psi parameters, N ranks):
//   stage 0: 2 Psi + 2 Psi + 12 Psi     stage 1: 2 Psi + 2 Psi + 12 Psi / N
//   stage 2: 2 Psi + 2 Psi / N + 12 Psi / N     stage 3: (2 + 2 + 12) Psi / N
// plus padding: each unit is rounded up to a multiple of N x the shard alignment (ParameterStore::kShardAlignment
// elements, or with 8-bit moments the quantization block). With 8-bit moments the optimizer's 12 Psi are 4 Psi of
// fp32 master weights and 2 Psi of codes, and a fp32 scale a block of each moment.
// Nothing is allocated for real: a counting memory hands out addresses that are never touched.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/tracking_allocator.h"
#include "engine/host_optimizer.h"
#include "engine/parameter_store.h"
#include "kernels/blockwise_quantization.h"
#include "models/model_registry.h"

namespace zb {
namespace {

struct Expected {
  double params, grads, optimizer;  // bytes per parameter, as multiples of Psi
};

// optimizer: the optimizer state's bytes a parameter, unpartitioned.
Expected formula(int stage, int world, double optimizer) {
  const double n = world;
  switch (stage) {
    case 0: return {2, 2, optimizer};
    case 1: return {2, 2, optimizer / n};
    case 2: return {2, 2 / n, optimizer / n};
    default: return {2 / n, 2 / n, optimizer / n};
  }
}

class ZeroMemory : public ::testing::TestWithParam<std::string> {};

TEST_P(ZeroMemory, PerRankBytesFollowTheFormulas) {
  const ParameterLayout layout(resolve_model(GetParam()));
  const double psi = double(layout.total_numel());
  const double units = double(layout.units().size());
  for (const bool eight_bit : {false, true})
  for (int world : {1, 2, 3, 4, 8}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (int rank : {0, world - 1}) {
        TrackingAllocator allocator(std::make_unique<CountingMemory>(Device::cuda(0)));
        // Persistence threshold 0: every stage-3 unit is partitioned, as the formula assumes.
        const OptimizerStateFormat state{true, eight_bit};
        ShardGeometry geometry{stage, rank, world, 0};
        geometry.alignment = eight_bit ? kQuantizationBlock : ParameterStore::kShardAlignment;
        ParameterStore store(layout, allocator, DType::bf16, state, geometry);
        const Expected e = formula(stage, world, eight_bit ? 4 + 2 + 8.0 / kQuantizationBlock : 12);
        // Padding adds at most N x alignment elements per unit to the whole, 1/N of that to a shard.
        const double pad = units * world * double(geometry.alignment);
        auto check = [&](MemoryPool pool, double per_param, const char* what) {
          const double measured = double(allocator.usage(pool).current);
          const double predicted = per_param * psi;
          SCOPED_TRACE(testing::Message() << GetParam() << (eight_bit ? " 8-bit" : "") << " stage " << stage
                                          << " world " << world << " rank " << rank << " " << what);
          EXPECT_GE(measured, predicted);
          EXPECT_LE(measured, predicted + per_param * pad);
        };
        check(MemoryPool::parameters, e.params, "parameters");
        check(MemoryPool::gradients, e.grads, "gradients");
        check(MemoryPool::optimizer_state, e.optimizer, "optimizer state");
        // Shards are equal on every rank.
        EXPECT_EQ(store.shard_numel(0) * world, store.padded_numel(0));
      }
    }
  }
}

// LoRA: the frozen base weights are held as the stage says (partitioned in stage 3), but only the adapters
// (Psi_a of them) have gradients and optimizer state: 2 (Psi + Psi_a) of weights, 2 Psi_a of gradients and
// 12 Psi_a of state, divided by N as the stage partitions them.
TEST(ZeroMemory, LoraKeepsGradientsAndStateForTheAdaptersAlone) {
  TransformerConfig config = resolve_model("meta-llama/Llama-2-7b-hf");
  config.lora = {16, 32.0, LoraTargets::attention};
  const ParameterLayout layout(config);
  const double psi = double(layout.total_numel()), adapters = double(layout.trainable_numel());
  EXPECT_NEAR(adapters, double(lora_parameter_count(config)), 1e-3 * adapters) << "(alignment gaps aside)";
  EXPECT_LT(adapters, 0.01 * psi);
  for (int world : {1, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(testing::Message() << "stage " << stage << " world " << world);
      TrackingAllocator allocator(std::make_unique<CountingMemory>(Device::cuda(0)));
      ParameterStore store(layout, allocator, DType::bf16, OptimizerStateFormat{true, false},
                           ShardGeometry{stage, 0, world, 0});
      const Expected e = formula(stage, world, 12);
      const double pad = double(layout.units().size()) * world * double(ParameterStore::kShardAlignment);
      auto check = [&](MemoryPool pool, double per_param, double count, const char* what) {
        const double measured = double(allocator.usage(pool).current);
        EXPECT_GE(measured, per_param * count) << what;
        EXPECT_LE(measured, per_param * (count + pad)) << what;
      };
      check(MemoryPool::parameters, e.params, psi, "parameters");
      check(MemoryPool::gradients, e.grads, adapters, "gradients");
      check(MemoryPool::optimizer_state, e.optimizer, adapters, "optimizer state");
    }
  }
}

// cpu_full under LoRA: the host holds every unit's weights (the frozen base too) and the adapters' state, and
// the host-memory check counts both.
TEST(ZeroMemory, LoraCpuFullCountsTheFrozenWeightsOnTheHost) {
  TransformerConfig config = resolve_model("meta-llama/Llama-2-7b-hf");
  config.lora = {16, 32.0, LoraTargets::attention};
  const ParameterLayout layout(config);
  for (int stage : {0, 3}) {
    SCOPED_TRACE(testing::Message() << "stage " << stage);
    TrackingAllocator device(std::make_unique<CountingMemory>(Device::cuda(0)));
    TrackingAllocator host(std::make_unique<CountingMemory>());
    ShardGeometry geometry{stage, 0, 2, 0, true, true};
    const OptimizerStateFormat state{true, false};
    ParameterStore store(layout, device, DType::bf16, state, geometry, &host);
    const size_t predicted = HostOptimizer::host_bytes(layout, DType::bf16, geometry, state, false);
    const double shards = stage == 0 ? 1 : 2;
    const double held = double(host.total().current);  // the store's: every unit's range of bf16 weights
    EXPECT_GE(held, 2.0 * double(layout.total_numel()) / shards);
    // and the adapters' fp32 master and moments, and their gradient buffers
    EXPECT_GE(double(predicted), held + 14.0 * double(layout.trainable_numel()) / shards);
    EXPECT_LE(double(predicted), 1.01 * (held + 14.0 * double(layout.trainable_numel()) / shards));
  }
}

TEST(ZeroMemory, PersistentUnitsStayWholeInStageThree) {
  const ParameterLayout layout(resolve_model("gpt2"));
  TrackingAllocator allocator(std::make_unique<CountingMemory>(Device::cuda(0)));
  // gpt2's final unit (ln_f: 1,536 elements) is under DeepSpeed's default threshold; its blocks are not.
  ParameterStore store(layout, allocator, DType::bf16, OptimizerStateFormat{}, ShardGeometry{3, 1, 4, 100'000});
  EXPECT_TRUE(store.whole_params(layout.final_unit()));
  EXPECT_FALSE(store.whole_params(layout.block_unit(0)));
  EXPECT_FALSE(store.whole_params(layout.embedding_unit()));
  EXPECT_EQ(store.param_shard(layout.final_unit()).data,
            static_cast<char*>(store.params(layout.final_unit()).data) +
                store.shard_begin(layout.final_unit()) * dtype_size(DType::bf16));
}

// An offload ratio below 1 keeps the optimizer state of the model's first units on the device: in forward
// order, every unit that still fits within 1 - ratio of the elements. The device allocates exactly their
// state; the host optimizer's needs shrink by the same elements. On Llama-3.2-1B the tied embedding (a fifth
// of the elements) fits in neither the 0.1 nor the 0.2 that ratios 0.9 and 0.8 leave: it is skipped, and the
// blocks after it still go to the device.
class OffloadRatio : public ::testing::TestWithParam<std::string> {};

TEST_P(OffloadRatio, KeepsTheFirstUnitsThatFitOnTheDevice) {
  const std::string model = GetParam();
  const ParameterLayout layout(resolve_model(model));
  const size_t units = layout.units().size();
  for (int world : {1, 2}) {
    for (double ratio : {1.0, 0.9, 0.8, 0.5, 0.05}) {
      SCOPED_TRACE(testing::Message() << model << " world " << world << " ratio " << ratio);
      const ShardGeometry geometry{1, 0, world, 0, true, false, ratio};
      TrackingAllocator allocator(std::make_unique<CountingMemory>(Device::cuda(0)));
      ParameterStore store(layout, allocator, DType::bf16, OptimizerStateFormat{}, geometry);
      double total = 0;
      for (size_t u = 0; u < units; ++u) total += double(store.padded_numel(u));
      double on_device = 0;
      for (size_t u = 0; u < units; ++u) {
        const double n = double(store.padded_numel(u));
        if (store.optimizer_on_host(u)) {
          EXPECT_GT(on_device + n, (1 - ratio) * total) << "unit " << u << " would have fitted";
        } else {
          on_device += n;
        }
      }
      EXPECT_LE(on_device, (1 - ratio) * total);
      if (ratio == 1.0) {
        EXPECT_EQ(on_device, 0);
      } else {
        EXPECT_GT(on_device, (0.9 - ratio) * total);  // blocks of 2-6% split the share finely
      }
      EXPECT_NEAR(ParameterStore::host_optimizer_share(layout, geometry), 1 - on_device / total, 1e-12);
      // fp32 master, m and v: 12 bytes an element of the rank's shard (stage 1), the device's units only.
      EXPECT_EQ(double(allocator.usage(MemoryPool::optimizer_state).current), 12 * on_device / world);
      const size_t all_on_host =
          HostOptimizer::host_bytes(layout, DType::bf16, ShardGeometry{1, 0, world, 0, true}, OptimizerStateFormat{}, false);
      const size_t host = HostOptimizer::host_bytes(layout, DType::bf16, geometry, OptimizerStateFormat{}, false);
      EXPECT_EQ(double(all_on_host - host), (12 + 2) * on_device / world);  // state and gradient buffer
    }
  }
  // Without offload the ratio means nothing: everything is on the device.
  EXPECT_EQ(ParameterStore::host_optimizer_share(layout, ShardGeometry{1, 0, 1, 0, false, false, 0.5}), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Models, OffloadRatio, ::testing::Values("gpt2-xl", "meta-llama/Llama-3.2-1B"));

INSTANTIATE_TEST_SUITE_P(Models, ZeroMemory,
                         ::testing::Values("gpt2", "gpt2-xl", "meta-llama/Llama-2-7b-hf", "llama-tiny"));

}  // namespace
}  // namespace zb
