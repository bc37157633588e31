// Lets Tensor::as<__nv_bfloat16>() and as<__half>() check and hand out bf16 and fp16 elements.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/dtype.h"

namespace zb {

template <>
struct DTypeOf<__nv_bfloat16> {
  static constexpr DType value = DType::bf16;
};

template <>
struct DTypeOf<__half> {
  static constexpr DType value = DType::f16;
};

}  // namespace zb
