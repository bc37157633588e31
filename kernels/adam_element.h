// One element of Adam's update as torch.optim defines it (AdamW: decoupled weight decay; Adam: L2 added to
// the gradient), given the bias corrections 1 - beta^step: the CPU reference's fp32 update and every 8-bit-moment
// update (kernels/adam_8bit.h) share it, so that they compute alike.
#pragma once

#include <cmath>

namespace zb {

template <typename T>
struct AdamElement {
  T lr, wd, b1, b2, eps, bias1, bias2;
  bool decoupled;

  // Updates the moments in place; returns the new weight. g is the scaled gradient.
  T operator()(T param, T g, T& m, T& v) const {
    if (!decoupled) g += wd * param;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    if (decoupled) param -= lr * wd * param;
    return param - lr * (m / bias1) / (std::sqrt(v / bias2) + eps);
  }
};

}  // namespace zb
