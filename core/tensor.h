// Tensor: a non-owning view of memory (pointer, shape, dtype, device). Row-major and contiguous.
// Ownership lives elsewhere (core/tracking_allocator.h's Buffer); views are cheap values.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"

namespace zb {

class Shape {
 public:
  static constexpr int kMaxRank = 4;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int axis) const { return dims_[axis]; }
  int64_t numel() const;
  bool operator==(const Shape& other) const;
  std::string to_string() const;

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

struct Tensor {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::f32;
  Device device = Device::cpu();

  Tensor() = default;
  Tensor(void* ptr, Shape dims, DType type, Device where) : data(ptr), shape(dims), dtype(type), device(where) {}

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int axis) const { return shape[axis]; }

  // The elements as T*, after checking that T is this tensor's dtype.
  template <typename T>
  T* as() const {
    ZB_CHECK(DTypeOf<T>::value == dtype, "tensor holds ", dtype_name(dtype), ", asked for ",
             dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(data);
  }

  // The same memory with another shape of the same element count.
  Tensor reshaped(Shape dims) const;
  // Elements [begin, end) of the flattened tensor, as a 1-D view.
  Tensor flat_slice(int64_t begin, int64_t end) const;
  std::string describe() const;
};

}  // namespace zb
