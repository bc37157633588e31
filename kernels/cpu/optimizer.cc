// Global-norm pieces and the optimizer updates (AdamW, Adam, SGD with momentum), following torch.optim.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/adam_element.h"
#include "kernels/cpu/cpu_ops.h"

namespace zb::cpu {

template <typename T>
double sum_of_squares(const T* x, int64_t n) {
  // Fixed-size chunks summed in double, then the chunk sums in order: the same bits for any thread count.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    double acc = 0;
    for (int64_t i = chunk * kChunk; i < std::min(n, (chunk + 1) * kChunk); ++i) acc += double(x[i]) * double(x[i]);
    partial[chunk] = acc;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

template <typename T>
void optimizer_step(T* master, const T* grad, T* m, T* v, int64_t n, const OptimizerParams& p) {
  const T lr = p.lr, wd = p.weight_decay, scale = p.grad_scale;
  switch (p.kind) {
    case OptimizerKind::adamw:
    case OptimizerKind::adam: {
      const T b1 = p.beta1, b2 = p.beta2;
      const AdamElement<T> adam{lr, wd, b1, b2, T(p.eps), 1 - std::pow(b1, static_cast<T>(p.step)),
                                1 - std::pow(b2, static_cast<T>(p.step)), p.kind == OptimizerKind::adamw};
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) master[i] = adam(master[i], grad[i] * scale, m[i], v[i]);
      break;
    }
    case OptimizerKind::sgd: {
      const T mu = p.momentum;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const T g = grad[i] * scale + wd * master[i];
        m[i] = mu * m[i] + g;  // the momentum buffer starts at 0, so step 1 gives g as in torch
        master[i] -= lr * m[i];
      }
      break;
    }
  }
}

template double sum_of_squares<float>(const float*, int64_t);
template double sum_of_squares<double>(const double*, int64_t);
template void optimizer_step<float>(float*, const float*, float*, float*, int64_t, const OptimizerParams&);
template void optimizer_step<double>(double*, const double*, double*, double*, int64_t, const OptimizerParams&);

}  // namespace zb::cpu
