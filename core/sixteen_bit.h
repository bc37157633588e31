// The host's conversions of a 16-bit dtype's elements (bf16 or fp16, as raw bits), chosen by dtype: for code
// that handles both alike.
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/f16.h"

namespace zb {

struct SixteenBitConversions {
  uint16_t (*from_float)(float);  // rounding to nearest even
  float (*to_float)(uint16_t);
};

inline SixteenBitConversions sixteen_bit_conversions(DType dtype) {
  ZB_CHECK(dtype == DType::bf16 || dtype == DType::f16, "a 16-bit dtype, not ", dtype_name(dtype));
  if (dtype == DType::f16) return {float_to_f16_bits, f16_bits_to_float};
  return {float_to_bf16_bits, bf16_bits_to_float};
}

}  // namespace zb
