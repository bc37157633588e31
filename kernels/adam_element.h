// One element of Adam's update as torch.optim defines it (AdamW: decoupled weight decay; Adam: L2 added to
// the gradient), given the bias corrections 1 - beta^step: the CPU reference's update, the GPU's fused update
// and every 8-bit-moment update (kernels/adam_8bit.h, on either device) share it, so that they compute alike.
#pragma once

#include <cmath>

#include "core/host_device.h"
#include "kernels/optimizer_params.h"

namespace zb {

template <typename T>
struct AdamElement {
  T lr, wd, b1, b2, eps, bias1, bias2;
  bool decoupled;

  // Updates the moments in place; returns the new weight. g is the scaled gradient.
  ZB_HOST_DEVICE T operator()(T param, T g, T& m, T& v) const {
    if (!decoupled) g += wd * param;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    if (decoupled) param -= lr * wd * param;
    return param - lr * (m / bias1) / (std::sqrt(v / bias2) + eps);
  }
};

// The fp32 element of Adam or AdamW (params.kind) with its bias corrections computed in fp32, as the CPU
// reference's fp32 update computes them; the 8-bit-moment updates take this one on both devices.
inline AdamElement<float> adam_element(const OptimizerParams& p) {
  return {p.lr, p.weight_decay, p.beta1, p.beta2, p.eps, 1 - std::pow(p.beta1, float(p.step)),
          1 - std::pow(p.beta2, float(p.step)), p.kind == OptimizerKind::adamw};
}

}  // namespace zb
