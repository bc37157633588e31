// Element types of tensors. f64 exists for the CPU reference backend's finite-difference tests;
// the training engine uses f32 (master weights, optimizer state, fp32 mode) and bf16/f16.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zb {

enum class DType { f32, f64, bf16, f16, i32 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
DType parse_dtype(std::string_view name);  // throws UsageError listing the accepted names

// Maps a C++ element type to its DType, so that Tensor::as<T>() can check what it hands out.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};

}  // namespace zb
