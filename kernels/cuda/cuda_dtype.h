// Lets Tensor::as<__nv_bfloat16>() check and hand out bf16 elements.
#pragma once

#include <cuda_bf16.h>

#include "core/dtype.h"

namespace zb {

template <>
struct DTypeOf<__nv_bfloat16> {
  static constexpr DType value = DType::bf16;
};

}  // namespace zb
