#include "core/dtype.h"

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::i32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f64: return "fp64";
    case DType::f32: return "fp32";
    case DType::i32: return "int32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "f32" || name == "float32") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp16" || name == "f16" || name == "float16") return DType::f16;
  throw UsageError(cat("unknown dtype '", name, "' (accepted: fp32, bf16, fp16)"));
}

}  // namespace zb
