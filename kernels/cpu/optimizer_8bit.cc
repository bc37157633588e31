// The CPU backend's 8-bit-moment Adam: kernels/adam_8bit.h's block update over every block of the range.
#include <algorithm>

#include "kernels/adam_8bit.h"
#include "kernels/blockwise_quantization.h"
#include "kernels/cpu/cpu_ops.h"

namespace zb::cpu {

void optimizer_step_8bit(float* master, const float* grad, QuantizedMoments moments, int64_t n,
                         const OptimizerParams& p) {
  const int64_t blocks = quantization_blocks(n);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kQuantizationBlock;
    adam_8bit_block(master + begin, grad + begin, std::min(kQuantizationBlock, n - begin), moments, b, p);
  }
}

}  // namespace zb::cpu
