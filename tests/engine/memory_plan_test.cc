// The engine's memory model (engine/memory_plan.h) against training itself, on the CPU backend under mpirun
// (1-4 ranks): for every stage, offload strategy (and a partial ratio), accumulation, checkpointing mode, LoRA
// and 8-bit moments, each rank's predicted peak per pool and in all equals, byte for byte, what its allocator
// measured over construction and three steps, and the offload's host memory (without speculation's spare state)
// what its host allocator held. (A planner's promise that a configuration fits rests on this.)
#include <gtest/gtest.h>

#include <cctype>

#include <string>
#include <vector>

#include "comm/mpi_world.h"
#include "core/strings.h"
#include "engine/memory_plan.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/model_registry.h"
#include "support/mpi_test_environment.h"
#include "support/temp_dir.h"

namespace zb {
namespace {

struct PlanCase {
  std::string model;
  int stage;
  OffloadStrategy offload = OffloadStrategy::none;
  double ratio = 1.0;
  int64_t grad_accum = 1;
  ActivationCheckpointing checkpointing = ActivationCheckpointing::none;
  bool lora = false, eight_bit = false;
  int64_t persistence_threshold = 0, prefetch = 30'000;
};

std::string name_of(const PlanCase& c) {
  std::string name = cat(c.model, "_stage", c.stage, "_", offload_spec_name(c.offload, c.ratio), "_accum",
                         c.grad_accum, "_", activation_checkpointing_name(c.checkpointing), c.lora ? "_lora" : "",
                         c.eight_bit ? "_8bit" : "", "_persist", c.persistence_threshold, "_prefetch", c.prefetch);
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

void PrintTo(const PlanCase& c, std::ostream* os) { *os << name_of(c); }

std::vector<PlanCase> every_plan_case() {
  std::vector<PlanCase> cases;
  for (const char* model : {"gpt2-tiny", "llama-tiny", "gemma3-tiny"}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (int64_t accum : {1, 2}) {
        cases.push_back({model, stage, OffloadStrategy::none, 1.0, accum});
        cases.push_back({model, stage, OffloadStrategy::cpu_full, 1.0, accum});
      }
      if (stage >= 1) {
        cases.push_back({model, stage, OffloadStrategy::cpu_optimizer, 1.0, 2});
        cases.push_back({model, stage, OffloadStrategy::cpu_optimizer, 0.5, 1});
        cases.push_back({model, stage, OffloadStrategy::nvme, 1.0, 1});
      }
      cases.push_back({model, stage, OffloadStrategy::none, 1.0, 1, ActivationCheckpointing::full});
      cases.push_back({model, stage, OffloadStrategy::none, 1.0, 2, ActivationCheckpointing::selective, true});
      cases.push_back({model, stage, OffloadStrategy::none, 1.0, 1, ActivationCheckpointing::none, false, true});
    }
    // Stage 3's persistent units and prefetch depth change its slots.
    cases.push_back({model, 3, OffloadStrategy::none, 1.0, 1, ActivationCheckpointing::none, false, false, 5'000});
    cases.push_back({model, 3, OffloadStrategy::none, 1.0, 2, ActivationCheckpointing::none, false, false, 0, 0});
    cases.push_back({model, 3, OffloadStrategy::none, 1.0, 1, ActivationCheckpointing::none, false, false, 0,
                     1'000'000});
  }
  return cases;
}

TrainingOptions options_of(const PlanCase& c, const std::string& nvme_path) {
  TrainingOptions o;
  o.model = resolve_model(c.model);
  if (c.lora) o.model.lora = {4, 8.0, LoraTargets::all};
  o.batch = 2;
  o.seq = 16;
  o.grad_accum = c.grad_accum;
  o.dtype = DType::f32;
  o.activation_checkpointing = c.checkpointing;
  o.optimizer.moments_8bit = c.eight_bit;
  o.zero.stage = c.stage;
  o.zero.reduce_bucket_size = 20'000;
  o.zero.allgather_bucket_size = 20'000;
  o.zero.stage3_param_persistence_threshold = c.persistence_threshold;
  o.zero.stage3_prefetch_bucket_size = c.prefetch;
  o.offload = c.offload;
  o.offload_ratio = c.ratio;
  o.speculative_update = false;  // (its spare state takes what the host can spare: not planned)
  if (c.offload == OffloadStrategy::nvme) o.nvme_path = nvme_path;
  return o;
}

class MemoryPlanTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(MemoryPlanTest, PredictsEveryPoolsPeakAsTrainingMeasuresIt) {
  Communicator& comm = test::mpi_communicator();
  test::TempDir folder;
  const TrainingOptions options = options_of(GetParam(), folder.path().string());
  TrackingAllocator allocator(std::make_unique<HostMemory>());
  CpuBackend backend;
  auto data = make_synthetic_tokens({options.batch, options.seq, comm.rank(), comm.size()},
                                    options.model.vocab_size, 99);
  size_t host_peak = 0;
  {
    Trainer trainer(options, backend, allocator, *data, &comm);
    for (int i = 0; i < 3; ++i) trainer.step();
    host_peak = trainer.host_allocator().total().peak;
  }
  const MemoryPlan plan = plan_memory(options, comm.rank(), comm.size());
  EXPECT_EQ(plan.host_bytes, host_peak) << "the offload's host memory on rank " << comm.rank();
  for (MemoryPool pool : kAllMemoryPools) {
    EXPECT_EQ(plan.pool(pool), allocator.usage(pool).peak) << memory_pool_name(pool) << " on rank " << comm.rank();
  }
  EXPECT_EQ(plan.peak, allocator.total().peak) << "rank " << comm.rank();
}

INSTANTIATE_TEST_SUITE_P(Configurations, MemoryPlanTest, ::testing::ValuesIn(every_plan_case()),
                         [](const auto& param_info) { return name_of(param_info.param); });

}  // namespace
}  // namespace zb
