#include "kernels/adam_8bit.h"

#include "core/check.h"
#include "kernels/adam_element.h"
#include "kernels/blockwise_quantization.h"

namespace zb {

void adam_8bit_block(float* master, const float* grad, int64_t count, const QuantizedMoments& moments, int64_t block,
                     const OptimizerParams& p) {
  adam_8bit_block(master, master, grad, count, moments, moments, block, p);
}

void adam_8bit_block(const float* master_in, float* master, const float* grad, int64_t count,
                     const QuantizedMoments& in, const QuantizedMoments& moments, int64_t block,
                     const OptimizerParams& p) {
  ZB_CHECK(count > 0 && count <= kQuantizationBlock, "a block of ", count, " elements");
  ZB_CHECK(p.kind == OptimizerKind::adamw || p.kind == OptimizerKind::adam, "8-bit moments are Adam's and AdamW's");
  const DynamicMap &first = DynamicMap::signed_map(), &second = DynamicMap::unsigned_map();
  const AdamElement<float> adam = adam_element(p);
  const int64_t begin = block * kQuantizationBlock;
  float m[kQuantizationBlock], v[kQuantizationBlock];
  dequantize_block(in.m_codes + begin, count, in.m_scales[block], first, m);
  dequantize_block(in.v_codes + begin, count, in.v_scales[block], second, v);
  for (int64_t k = 0; k < count; ++k) {
    master[k] = adam(master_in[k], grad[k] * p.grad_scale, m[k], v[k]);
  }
  const uint64_t element = moments.first_element + uint64_t(begin), stream = 2 * uint64_t(p.step);
  const StochasticRounding m_rounding{moments.seed, stream, element}, v_rounding{moments.seed, stream + 1, element};
  moments.m_scales[block] = quantize_block(m, count, first, moments.m_codes + begin, &m_rounding);
  moments.v_scales[block] = quantize_block(v, count, second, moments.v_codes + begin, &v_rounding);
}

}  // namespace zb
