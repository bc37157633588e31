// AdamW with both moments in 8 bits, block by block (kernels/blockwise_quantization.h): the reference the
// GPU kernel and the CPU optimizer follow. Each block's moments are read back to fp32, updated as AdamW
// updates them, and stored again with the block's new scale, rounded stochastically; the master weights stay
// fp32.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cpu/adam_element.h"
#include "kernels/cpu/cpu_ops.h"

namespace zb::cpu {

void optimizer_step_8bit(float* master, const float* grad, QuantizedMoments moments, int64_t n,
                         const OptimizerParams& p) {
  ZB_CHECK(p.kind == OptimizerKind::adamw || p.kind == OptimizerKind::adam,
           "8-bit moments are Adam's and AdamW's");
  const DynamicMap &first = DynamicMap::signed_map(), &second = DynamicMap::unsigned_map();
  const float b1 = p.beta1, b2 = p.beta2;
  const AdamElement<float> adam{p.lr, p.weight_decay, b1, b2, p.eps, 1 - std::pow(b1, float(p.step)),
                                1 - std::pow(b2, float(p.step)), p.kind == OptimizerKind::adamw};
  const int64_t blocks = quantization_blocks(n);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kQuantizationBlock, count = std::min(kQuantizationBlock, n - begin);
    float m[kQuantizationBlock], v[kQuantizationBlock];
    dequantize_block(moments.m_codes + begin, count, moments.m_scales[b], first, m);
    dequantize_block(moments.v_codes + begin, count, moments.v_scales[b], second, v);
    for (int64_t k = 0; k < count; ++k) {
      master[begin + k] = adam(master[begin + k], grad[begin + k] * p.grad_scale, m[k], v[k]);
    }
    const uint64_t element = moments.first_element + uint64_t(begin), stream = 2 * uint64_t(p.step);
    const StochasticRounding m_rounding{moments.seed, stream, element}, v_rounding{moments.seed, stream + 1, element};
    moments.m_scales[b] = quantize_block(m, count, first, moments.m_codes + begin, &m_rounding);
    moments.v_scales[b] = quantize_block(v, count, second, moments.v_codes + begin, &v_rounding);
  }
}

}  // namespace zb::cpu
