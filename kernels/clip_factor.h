// The gradient factor of global-norm clipping, one formula for the host and the kernels so that a step
// clipped on the device and one clipped on the host scale by the same bits.
#pragma once

#include <cmath>

#include "core/host_device.h"

namespace zb {

// torch.nn.utils.clip_grad_norm_'s factor, min(1, max_norm / (norm + 1e-6)) with norm = sqrt(sum_of_squares),
// in fp64; 1 when max_norm is 0 (no clipping). NaN when the sum of squares or the loss is not finite: the
// step must not be applied (see OptimizerParams::grad_factor).
ZB_HOST_DEVICE inline float clip_factor(double sum_of_squares, double loss, float max_norm) {
  if (!std::isfinite(sum_of_squares) || !std::isfinite(loss)) return NAN;
  if (max_norm <= 0) return 1.0f;
  return float(std::fmin(1.0, double(max_norm) / (std::sqrt(sum_of_squares) + 1e-6)));
}

}  // namespace zb
