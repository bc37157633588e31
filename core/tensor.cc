#include "core/tensor.h"

#include "core/strings.h"

namespace zb {

Shape::Shape(std::initializer_list<int64_t> dims) {
  ZB_CHECK(dims.size() <= kMaxRank, "a shape has at most ", kMaxRank, " dimensions");
  for (int64_t d : dims) {
    ZB_CHECK(d >= 0, "negative dimension ", d);
    dims_[rank_++] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += cat(i ? ", " : "", dims_[i]);
  return s + "]";
}

Tensor Tensor::reshaped(Shape dims) const {
  ZB_CHECK(dims.numel() == numel(), "cannot view ", shape.to_string(), " as ", dims.to_string());
  return Tensor(data, dims, dtype, device);
}

Tensor Tensor::flat_slice(int64_t begin, int64_t end) const {
  ZB_CHECK(0 <= begin && begin <= end && end <= numel(), "slice [", begin, ", ", end, ") of ", numel());
  auto* base = static_cast<char*>(data) + static_cast<size_t>(begin) * dtype_size(dtype);
  return Tensor(base, Shape{end - begin}, dtype, device);
}

std::string Tensor::describe() const {
  return cat(dtype_name(dtype), shape.to_string(), "@", device.to_string());
}

}  // namespace zb
