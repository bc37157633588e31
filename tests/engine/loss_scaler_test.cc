// The loss scaler's rule, step by step, against DeepSpeed's DynamicLossScaler (consecutive_hysteresis off):
// overflows use up the hysteresis before the scale halves, the scale stops at its minimum, and a window of
// clean steps doubles it and restores the hysteresis.
#include "engine/loss_scaler.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/errors.h"

namespace zb {
namespace {

LossScaling dynamic(int power, int64_t window, int hysteresis, double min_scale) {
  LossScaling s;
  s.enabled = true;
  s.initial_scale_power = power;
  s.window = window;
  s.hysteresis = hysteresis;
  s.min_scale = min_scale;
  return s;
}

// The scales before each step of `overflows`.
std::vector<float> scales(const LossScaling& scaling, const std::vector<bool>& overflows) {
  LossScaler scaler(scaling);
  std::vector<float> out;
  for (bool overflow : overflows) {
    out.push_back(scaler.scale());
    scaler.update(overflow);
  }
  out.push_back(scaler.scale());
  return out;
}

TEST(LossScaler, StartsAtTwoToThePowerAndHalvesAfterTheHysteresis) {
  EXPECT_EQ(LossScaler(LossScaling{}).scale(), 65536.0f) << "DeepSpeed's initial_scale_power 16";
  EXPECT_EQ(scales(dynamic(4, 1000, 2, 1), {true, true, true, false, true}),
            (std::vector<float>{16, 16, 8, 4, 4, 2}))
      << "the first overflow uses up the hysteresis; it is not restored by a clean step";
  EXPECT_EQ(scales(dynamic(4, 1000, 1, 1), {true, false, true}), (std::vector<float>{16, 8, 8, 4}));
}

// The scale stops at the minimum; an overflow there ends training, as DeepSpeed's raise_error_at_min_scale.
TEST(LossScaler, StopsAtTheMinimumAndAnOverflowThereIsAnError) {
  EXPECT_EQ(scales(dynamic(2, 1000, 1, 1), {true, true, false}), (std::vector<float>{4, 2, 1, 1}));
  EXPECT_EQ(scales(dynamic(2, 1000, 1, 3), {true, false}), (std::vector<float>{4, 3, 3}));
  EXPECT_THROW(scales(dynamic(2, 1000, 1, 1), {true, true, true}), Error);
  EXPECT_EQ(scales(dynamic(0, 1000, 2, 1), {true}), (std::vector<float>{1, 1})) << "the hysteresis first";
  EXPECT_THROW(scales(dynamic(0, 1000, 2, 1), {true, true}), Error);
}

TEST(LossScaler, GrowsNoFurtherThanFp32Holds) {
  const std::vector<float> grown = scales(dynamic(126, 1, 1, 1), {false, false, false});
  EXPECT_EQ(grown, (std::vector<float>{0x1p126f, 0x1p127f, 0x1p127f, 0x1p127f}));
}

TEST(LossScaler, AWindowOfCleanStepsDoublesItAndRestoresTheHysteresis) {
  // window 3: DeepSpeed doubles when (step - last overflow step) is a multiple of the window.
  EXPECT_EQ(scales(dynamic(4, 3, 1, 1), {false, false, false, false, false, false}),
            (std::vector<float>{16, 16, 16, 32, 32, 32, 64}));
  EXPECT_EQ(scales(dynamic(4, 3, 1, 1), {true, false, false, false}), (std::vector<float>{16, 8, 8, 8, 16}));
  EXPECT_EQ(scales(dynamic(4, 2, 2, 1), {true, false, false, true, true}), (std::vector<float>{16, 16, 16, 32, 32, 16}))
      << "the growth restored the hysteresis the first overflow had used";
}

TEST(LossScaler, AStaticScaleStaysAndCountsTheSkippedSteps) {
  LossScaling fixed;
  fixed.enabled = true;
  fixed.static_scale = 128;
  LossScaler scaler(fixed);
  for (bool overflow : {true, false, true}) scaler.update(overflow);
  EXPECT_EQ(scaler.scale(), 128.0f);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

TEST(LossScaler, RefusesWhatDeepSpeedWouldNot) {
  LossScaling s;
  s.window = 0;
  EXPECT_THROW(validate(s), UsageError);
  s = {};
  s.hysteresis = 0;
  EXPECT_THROW(validate(s), UsageError);
  s = {};
  s.min_scale = 0;
  EXPECT_THROW(validate(s), UsageError);
  s = {};
  s.static_scale = -1;
  EXPECT_THROW(validate(s), UsageError);
  s = {};
  s.initial_scale_power = 200;
  EXPECT_THROW(validate(s), UsageError);
  EXPECT_NO_THROW(validate(LossScaling{}));
}

}  // namespace
}  // namespace zb
