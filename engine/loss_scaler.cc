#include "engine/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

void validate(const LossScaling& s) {
  if (!(s.static_scale >= 0) || !std::isfinite(float(s.static_scale)))
    throw UsageError(cat("fp16.loss_scale: must be 0 (dynamic) or a positive scale fp32 can hold, got ", s.static_scale));
  if (s.initial_scale_power < 0 || s.initial_scale_power > 127)
    throw UsageError(cat("fp16.initial_scale_power: must be in [0, 127], got ", s.initial_scale_power));
  if (s.window < 1) throw UsageError(cat("fp16.loss_scale_window: must be at least 1, got ", s.window));
  if (s.hysteresis < 1) throw UsageError(cat("fp16.hysteresis: must be at least 1, got ", s.hysteresis));
  if (!(s.min_scale > 0) || !std::isfinite(float(s.min_scale)))
    throw UsageError(cat("fp16.min_loss_scale: must be a positive number fp32 can hold, got ", s.min_scale));
}

LossScaler::LossScaler(const LossScaling& scaling)
    : scaling_(scaling),
      scale_(scaling.static_scale > 0 ? float(scaling.static_scale) : std::ldexp(1.0f, scaling.initial_scale_power)),
      hysteresis_left_(scaling.hysteresis) {}

void LossScaler::update(bool overflow) {
  if (overflow) ++skipped_;
  if (scaling_.static_scale > 0) return;
  if (overflow) {
    if (scaling_.hysteresis == 1 || hysteresis_left_ == 1) {
      if (scale_ <= float(scaling_.min_scale)) {
        throw Error(cat("the gradients overflow at the minimum loss scale (", scaling_.min_scale, ", ", skipped_,
                        " steps skipped so far): training has diverged"));
      }
      scale_ = std::max(scale_ / 2, float(scaling_.min_scale));
    } else {
      --hysteresis_left_;
    }
    last_overflow_step_ = step_;
  } else if ((step_ - last_overflow_step_) % scaling_.window == 0) {
    // (DeepSpeed's default, consecutive_hysteresis off: the hysteresis is restored only as the scale grows.)
    hysteresis_left_ = scaling_.hysteresis;
    scale_ = std::min(scale_ * 2, std::ldexp(1.0f, 127));
  }
  ++step_;
}

}  // namespace zb
