// The gradient factor of global-norm clipping, one formula for the host and the kernels so that a step
// clipped on the device and one clipped on the host scale by the same bits.
#pragma once

#include <cmath>

#include "core/host_device.h"

namespace zb {

// torch.nn.utils.clip_grad_norm_'s factor, min(1, max_norm / (norm + 1e-6)) with norm = sqrt(sum_of_squares),
// in fp64; 1 when max_norm is 0 (no clipping). NaN when the sum of squares or the loss is not finite: the
// step must not be applied (see OptimizerParams::grad_factor). With loss scaling, the gradients (and their sum
// of squares) are loss_scale (a power of two) times the true ones: the norm is of the true gradients, and the
// factor undoes the scale too, so that gradient x factor is the clipped true gradient.
ZB_HOST_DEVICE inline float clip_factor(double sum_of_squares, double loss, float max_norm, float loss_scale = 1.0f) {
  if (!std::isfinite(sum_of_squares) || !std::isfinite(loss)) return NAN;
  const double scale = loss_scale, norm = std::sqrt(sum_of_squares) / scale;
  if (max_norm <= 0) return float(1.0 / scale);
  return float(std::fmin(1.0, double(max_norm) / (norm + 1e-6)) / scale);
}

}  // namespace zb
