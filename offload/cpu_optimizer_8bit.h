// The CPU optimizer's 8-bit-moment block update with AVX-512: kernels/adam_8bit.h's adam_8bit_block (the
// reference, which the other levels run) to the bit, sixteen elements at a time. The moments' codes read back
// through the map's table, the Adam element as AdamElement<float> computes it (no fused multiply-adds: this
// file is compiled without contraction), the block's largest magnitudes, and the stochastic rounding of each
// moment by a branch-free search of the map's sorted values with Philox drawn sixteen groups at a time.
#pragma once

#include <cstdint>

#include "kernels/adam_8bit.h"

namespace zb {

// Whether adam_8bit_block_avx512 takes a block of `count` elements (else the caller runs the reference).
inline bool avx512_takes_block(int64_t count) { return count % 64 == 0; }

// adam_8bit_block(master_in, master, grad, count, in, out, block, params) on a CPU with AVX-512F.
void adam_8bit_block_avx512(const float* master_in, float* master, const float* grad, int64_t count,
                            const QuantizedMoments& in, const QuantizedMoments& out, int64_t block,
                            const OptimizerParams& params);

}  // namespace zb
