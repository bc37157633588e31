// fp16's loss-scaling flags: DeepSpeed's defaults where absent, each value taken, each bad one refused naming
// its flag, and the flags refused outright for the dtypes that need no loss scale. (train on a machine without
// a GPU refuses --dtype fp16 before these, so they are checked here rather than through the program.)
#include <gtest/gtest.h>

#include "bench/cli.h"
#include "core/errors.h"

namespace zb {
namespace {

std::string refusal(const TrainingFlags& flags, DType dtype) {
  try {
    loss_scaling_of(flags, dtype);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(LossScalingFlags, Fp16TakesDeepSpeedsDefaultsAndEachFlag) {
  TrainingFlags flags;
  const LossScaling defaults = loss_scaling_of(flags, DType::f16);
  EXPECT_TRUE(defaults.enabled);
  EXPECT_EQ(defaults.static_scale, 0) << "dynamic";
  EXPECT_EQ(defaults.initial_scale_power, 16);
  EXPECT_EQ(defaults.window, 1000);
  EXPECT_EQ(defaults.hysteresis, 2);
  EXPECT_EQ(defaults.min_scale, 1);
  flags.loss_scale = 512;
  flags.initial_scale_power = 10;
  flags.loss_scale_window = 50;
  flags.hysteresis = 1;
  flags.min_loss_scale = 0.5;
  const LossScaling given = loss_scaling_of(flags, DType::f16);
  EXPECT_EQ(given.static_scale, 512);
  EXPECT_EQ(given.initial_scale_power, 10);
  EXPECT_EQ(given.window, 50);
  EXPECT_EQ(given.hysteresis, 1);
  EXPECT_EQ(given.min_scale, 0.5);
}

TEST(LossScalingFlags, BadValuesAreRefusedNamingTheFlag) {
  const auto with = [](auto set) {
    TrainingFlags flags;
    set(flags);
    return refusal(flags, DType::f16);
  };
  EXPECT_NE(with([](TrainingFlags& f) { f.loss_scale = -1; }).find("--loss-scale: must be a number in [0, "),
            std::string::npos);
  EXPECT_NE(with([](TrainingFlags& f) { f.loss_scale = 1e39; }).find("--loss-scale"), std::string::npos);
  EXPECT_NE(with([](TrainingFlags& f) { f.initial_scale_power = 128; })
                .find("--initial-scale-power: must be an integer in [0, 127], got 128"),
            std::string::npos);
  EXPECT_NE(with([](TrainingFlags& f) { f.loss_scale_window = 0; }).find("--loss-scale-window: must be an integer in [1, "),
            std::string::npos);
  EXPECT_NE(with([](TrainingFlags& f) { f.hysteresis = -2; }).find("--hysteresis: must be an integer in [1, "),
            std::string::npos);
  EXPECT_NE(with([](TrainingFlags& f) { f.min_loss_scale = 0; }).find("--min-loss-scale: must be a non-zero number"),
            std::string::npos);
}

TEST(LossScalingFlags, OtherDtypesNeedNoneAndRefuseTheFlags) {
  TrainingFlags flags;
  EXPECT_FALSE(loss_scaling_of(flags, DType::bf16).enabled);
  EXPECT_FALSE(loss_scaling_of(flags, DType::f32).enabled);
  flags.min_loss_scale = 2;
  EXPECT_EQ(refusal(flags, DType::bf16), "--min-loss-scale: loss scaling is for --dtype fp16 (bf16 needs none: its range is fp32's)");
}

}  // namespace
}  // namespace zb
