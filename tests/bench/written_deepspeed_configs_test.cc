// Every configuration zero_bench and offload_bench can recommend is written as a DeepSpeed config that
// DeepSpeed loads (the rules of support/deepspeed_schema.h): every stage, offload strategy and ratio,
// precision, optimizer and accumulation, on one GPU and several. Where DeepSpeed cannot express the
// configuration (a partial optimizer offload below stage 3, any offload in stage 0, parameter offload below
// stage 3), the nearest config it takes is written and the note says what differs.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "bench/comparison_output.h"
#include "models/model_registry.h"
#include "support/deepspeed_schema.h"

namespace zb {
namespace {

TEST(WrittenDeepSpeedConfigs, EveryRecommendableConfigurationLoadsInDeepSpeed) {
  int written = 0;
  for (int stage = 0; stage <= 3; ++stage)
    for (OffloadStrategy strategy :
         {OffloadStrategy::none, OffloadStrategy::cpu_optimizer, OffloadStrategy::cpu_full, OffloadStrategy::nvme})
      for (double ratio : {1.0, 0.5}) {
        if (ratio < 1 && strategy != OffloadStrategy::cpu_optimizer && strategy != OffloadStrategy::nvme) continue;
        for (DType dtype : {DType::bf16, DType::f16, DType::f32})
          for (OptimizerKind optimizer : {OptimizerKind::adamw, OptimizerKind::adam, OptimizerKind::sgd})
            for (int64_t accum : {1, 4})
              for (int world : {1, 4}) {
                TrainingOptions o;
                o.model = resolve_model("gpt2-tiny");
                o.batch = 4;
                o.grad_accum = accum;
                o.zero.stage = stage;
                o.offload = strategy;
                o.offload_ratio = ratio;
                o.nvme_path = "/mnt/nvme/zb";
                o.dtype = dtype;
                o.loss_scaling.enabled = dtype == DType::f16;
                o.loss_scaling.hysteresis = 3;
                o.optimizer.kind = optimizer;
                const std::string label =
                    cat("stage ", stage, ", ", offload_spec_name(strategy, ratio), ", ", dtype_name(dtype), ", ",
                        optimizer_kind_name(optimizer), ", accum ", accum, ", world ", world);
                const nlohmann::json config = deepspeed_config_json(deepspeed_settings(o));
                test::expect_deepspeed_accepts(config, world, label);
                if (dtype == DType::f16) {  // the loss scaling it ran with
                  EXPECT_EQ(config.at("fp16").at("enabled"), true) << label;
                  EXPECT_EQ(config.at("fp16").at("hysteresis"), 3) << label;
                  EXPECT_EQ(config.at("fp16").at("loss_scale"), 0.0) << label;
                  EXPECT_EQ(config.at("fp16").at("initial_scale_power"), 16) << label;
                }
                // Dropped where DeepSpeed cannot take it, and said so.
                const bool partial_below_3 = ratio < 1 && stage < 3;
                const bool offload_dropped = strategy != OffloadStrategy::none && stage == 0;
                const bool param_dropped = strategy == OffloadStrategy::cpu_full && stage < 3;
                EXPECT_EQ(deepspeed_caveat(o).empty(), !(partial_below_3 || offload_dropped || param_dropped))
                    << label << ": " << deepspeed_caveat(o);
                ++written;
              }
      }
  EXPECT_GT(written, 450);
}

// A mutant of the writer that keeps a partial offload at stage 2 is caught by the rules.
TEST(WrittenDeepSpeedConfigs, TheRulesCatchAConfigDeepSpeedRefuses) {
  nlohmann::json config = nlohmann::json::parse(R"({"train_micro_batch_size_per_gpu": 4,
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})");
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    test::expect_deepspeed_accepts(config, 1, "mutant");
  }
  ASSERT_EQ(failures.size(), 1);
  EXPECT_NE(std::string(failures.GetTestPartResult(0).message()).find("Partial offloading"), std::string::npos);
}

}  // namespace
}  // namespace zb
