// Loss scaling for fp16 training, with DeepSpeed's knobs and its dynamic rule (deepspeed/runtime/fp16/
// loss_scaler.py's DynamicLossScaler): the loss's gradient is multiplied by the scale, so that small gradients
// stay above fp16's smallest numbers, and the update divides it out. A step whose gradients overflowed (an
// inf or NaN on any rank) is skipped. Dynamic scaling then lowers the scale, after `hysteresis` overflows in a
// row (the first ones only use up the hysteresis), by half and not below `min_scale`; after `window` steps in
// a row without an overflow it doubles the scale (up to 2^127, fp32's largest power of two). An overflow that
// would lower a scale already at its minimum ends training with an Error, as DeepSpeed's default
// (raise_error_at_min_scale) does: the gradients overflow whatever the scale, the run has diverged.
#pragma once

#include <cstdint>

namespace zb {

struct LossScaling {
  bool enabled = false;       // on with fp16 (the programs turn it on); tests turn it on with fp32 too
  double static_scale = 0;    // fp16.loss_scale: 0 for dynamic scaling, else this fixed scale
  int initial_scale_power = 16;  // the dynamic scale starts at 2^this
  int64_t window = 1000;          // fp16.loss_scale_window
  int hysteresis = 2;             // fp16.hysteresis
  double min_scale = 1;           // fp16.min_loss_scale
  bool operator==(const LossScaling&) const = default;
};

// Throws UsageError naming DeepSpeed's key (fp16.loss_scale, ...) for a value it would not take.
void validate(const LossScaling& scaling);

class LossScaler {
 public:
  explicit LossScaler(const LossScaling& scaling);
  // The scale of the next step's gradients.
  float scale() const { return scale_; }
  // After a step: whether its gradients overflowed (it was skipped). Moves the scale as DeepSpeed does; throws
  // Error at the minimum (see above).
  void update(bool overflow);
  int64_t skipped_steps() const { return skipped_; }

 private:
  LossScaling scaling_;
  float scale_;
  int hysteresis_left_;
  int64_t step_ = 0, last_overflow_step_ = -1, skipped_ = 0;
};

}  // namespace zb
