// The CPU optimizer's 8-bit-moment block update with AVX-512 (sixteen elements at a time) and AVX2 (eight):
// kernels/adam_8bit.h's adam_8bit_block (the reference, which the scalar level runs) to the bit. The moments'
// codes read back through the map's table, the Adam element as AdamElement<float> computes it (no fused
// multiply-adds: these files are compiled without contraction), the block's largest magnitudes, and the
// stochastic rounding of each moment: the count of the map's values at or below each quotient estimated as
// count_at_or_below does and checked against the two values around it (a binary search of the table where it is
// off), with Philox drawn for a vector of groups at a time.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/adam_8bit.h"
#include "kernels/blockwise_quantization.h"

namespace zb {

// Whether the vector levels take a block of `count` elements (else the caller runs the reference).
inline bool vector_takes_block(int64_t count) { return count % 64 == 0; }

// A map's tables as 32-bit lanes gather them: values by code, and the values in increasing order.
struct GatherTables {
  std::array<float, 256> values, sorted;
  float largest = 0;  // sorted[255]
  bool is_signed = false;
  explicit GatherTables(const DynamicMap& map) : is_signed(map.is_signed()) {
    for (int i = 0; i < 256; ++i) {
      values[size_t(i)] = map.values()[i];
      sorted[size_t(i)] = map.sorted_values()[i];
    }
    largest = sorted[255];
  }
};

inline const GatherTables& first_tables() {  // the first moment's: the signed map
  static const GatherTables tables(DynamicMap::signed_map());
  return tables;
}
inline const GatherTables& second_tables() {  // the second moment's: the unsigned map
  static const GatherTables tables(DynamicMap::unsigned_map());
  return tables;
}

// adam_8bit_block(master_in, master, grad, count, in, out, block, params) on a CPU with AVX-512F, and with AVX2.
void adam_8bit_block_avx512(const float* master_in, float* master, const float* grad, int64_t count,
                            const QuantizedMoments& in, const QuantizedMoments& out, int64_t block,
                            const OptimizerParams& params);
void adam_8bit_block_avx2(const float* master_in, float* master, const float* grad, int64_t count,
                          const QuantizedMoments& in, const QuantizedMoments& out, int64_t block,
                          const OptimizerParams& params);

}  // namespace zb
