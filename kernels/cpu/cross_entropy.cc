// Softmax cross-entropy over the vocabulary, with the gradient written in place of the logits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_ops.h"

namespace zb::cpu {

template <typename T>
void cross_entropy(const T* logits, const int32_t* targets, int64_t n, int64_t padded_vocab, int64_t vocab, T* losses,
                   T* dlogits, T grad_scale) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const T* x = logits + row * padded_vocab;
    T max_logit = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < vocab; ++j) max_logit = std::max(max_logit, x[j]);
    // In double: a float running sum of 2e5 terms loses 3e-4 of it (each addition rounds against a sum far
    // larger than the term), which the GPU's tree of partial sums does not.
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(x[j] - max_logit);
    const T lse = max_logit + T(std::log(sum));
    const int64_t target = targets[row];
    losses[row] = lse - x[target];
    if (!dlogits) continue;
    T* dx = dlogits + row * padded_vocab;  // may be x itself: each element is read before it is written
    for (int64_t j = 0; j < vocab; ++j) dx[j] = (std::exp(x[j] - lse) - (j == target ? 1 : 0)) * grad_scale;
    for (int64_t j = vocab; j < padded_vocab; ++j) dx[j] = 0;
  }
}

template void cross_entropy<float>(const float*, const int32_t*, int64_t, int64_t, int64_t, float*, float*, float);
template void cross_entropy<double>(const double*, const int32_t*, int64_t, int64_t, int64_t, double*, double*,
                                    double);

}  // namespace zb::cpu
