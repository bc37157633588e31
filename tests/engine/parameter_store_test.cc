// ParameterStore::initialize draws the weights on the backend's device; every rank of every stage must then hold
// exactly the values the layout gives for its range (initial_unit_values, the host's computation that the host
// optimizer and the host-resident weights use), zeros in the padding, and zero moments.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/tracking_allocator.h"
#include "engine/parameter_store.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/model_registry.h"

namespace zb {
namespace {

std::vector<float> values_of(const Tensor& t) { return std::vector<float>(t.as<float>(), t.as<float>() + t.numel()); }

TEST(ParameterStoreInitialize, EveryRankHoldsTheLayoutsValuesForItsRange) {
  TransformerConfig config = resolve_model("llama-tiny");
  config.vocab_size = 300;  // padding rows that must stay zero
  const ParameterLayout layout(config);
  CpuBackend backend;
  const uint64_t seed = 23;
  for (const int stage : {0, 1, 3}) {
    for (const int rank : {0, 2}) {
      SCOPED_TRACE(testing::Message() << "stage " << stage << " rank " << rank);
      TrackingAllocator allocator(std::make_unique<HostMemory>());
      // Threshold 0: every stage-3 unit is sharded, and rank 2 of 3 holds the padding past the unit's end.
      ParameterStore store(layout, allocator, DType::f32, OptimizerStateFormat{}, ShardGeometry{stage, rank, 3, 0});
      store.initialize(backend, seed);
      for (size_t u = 0; u < layout.units().size(); ++u) {
        const bool whole = store.whole_params(u);
        const Tensor weights = whole ? store.params(u) : store.param_shard(u);
        const int64_t begin = whole ? 0 : store.shard_begin(u);
        EXPECT_EQ(values_of(weights), initial_unit_values(layout, u, seed, begin, weights.numel()))
            << layout.unit(u).name;
        const Tensor master = store.master(u);
        EXPECT_EQ(values_of(master),
                  initial_unit_values(layout, u, seed, store.optimizer_begin(u), master.numel()))
            << layout.unit(u).name << "'s master";
        const std::vector<float> m = values_of(store.first_moment(u));
        EXPECT_EQ(m, std::vector<float>(m.size(), 0.0f)) << layout.unit(u).name << "'s first moment";
      }
    }
  }
}

TEST(ParameterStoreInitialize, TheValuesAreTheSchemesAndDependOnTheSeed) {
  const ParameterLayout layout(resolve_model("gpt2-tiny"));
  CpuBackend backend;
  TrackingAllocator allocator(std::make_unique<HostMemory>());
  ParameterStore a(layout, allocator, DType::f32, OptimizerStateFormat{}), b(layout, allocator, DType::f32, OptimizerStateFormat{});
  a.initialize(backend, 1);
  b.initialize(backend, 2);
  const size_t block = layout.block_unit(0);
  const std::vector<float> va = values_of(a.params(block)), vb = values_of(b.params(block));
  EXPECT_NE(va, vb);
  const ParameterTensor& ln = layout.unit(block).tensor("ln1.weight");
  for (int64_t i = 0; i < ln.numel(); ++i) ASSERT_EQ(va[ln.offset + i], 1.0f) << "ln1.weight[" << i << "]";
  const ParameterTensor& fc = layout.unit(block).tensor("mlp.fc.weight");
  double sum_sq = 0;
  for (int64_t i = 0; i < fc.numel(); ++i) sum_sq += double(va[fc.offset + i]) * va[fc.offset + i];
  EXPECT_NEAR(std::sqrt(sum_sq / double(fc.numel())), fc.init_std, 0.05 * fc.init_std);
}

}  // namespace
}  // namespace zb
