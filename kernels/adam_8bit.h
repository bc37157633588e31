// Adam and AdamW with both moments in 8 bits, one quantization block at a time (kernels/blockwise_quantization.h):
// the block's moments read back to fp32, updated as fp32 Adam updates them (AdamElement, the same arithmetic),
// and stored again with the block's new scale, rounded stochastically. The master weights stay fp32. The CPU
// backend and the CPU optimizer both run it; the GPU kernel follows it.
#pragma once

#include <cstdint>

#include "kernels/optimizer_params.h"

namespace zb {

// The moments of a range of n elements: a code per element, a scale per block of kQuantizationBlock. Codes of
// 0 with scales of 0 are moments of 0.
struct QuantizedMoments {
  uint8_t* m_codes = nullptr;  // the signed map's
  uint8_t* v_codes = nullptr;  // the unsigned map's
  float* m_scales = nullptr;
  float* v_scales = nullptr;
  // Stochastic rounding's numbers: Philox under `seed`, streams 2 step and 2 step + 1 (m and v), element
  // first_element + i for element i of the range (its place in the whole, a multiple of 4).
  uint64_t seed = 0;
  uint64_t first_element = 0;
};

// Updates block `block` of the range, `count` elements (kQuantizationBlock but for the last): master and grad
// point at the block's first element (grad fp32, unscaled: params.grad_scale applies). params.kind is adam or
// adamw.
void adam_8bit_block(float* master, const float* grad, int64_t count, const QuantizedMoments& moments, int64_t block,
                     const OptimizerParams& params);
// The same out of place: the master and the moments read from master_in and `in`, the results written to
// master and `out` (the speculative update of the offload strategies keeps the state it started from).
// `in`'s seed and first element are ignored: `out`'s number the elements.
void adam_8bit_block(const float* master_in, float* master, const float* grad, int64_t count,
                     const QuantizedMoments& in, const QuantizedMoments& out, int64_t block,
                     const OptimizerParams& params);

}  // namespace zb
