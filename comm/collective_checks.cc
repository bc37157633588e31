#include "comm/collective_checks.h"

#include <cstdint>

namespace zb {
namespace {

bool overlap(const Tensor& a, const Tensor& b) {
  const auto a_begin = reinterpret_cast<uintptr_t>(a.data);
  const auto b_begin = reinterpret_cast<uintptr_t>(b.data);
  return a.bytes() > 0 && b.bytes() > 0 && a_begin < b_begin + b.bytes() && b_begin < a_begin + a.bytes();
}

// Whether `part` is exactly slice `rank` of `whole` (which holds size slices of part's length), checking
// that it is that slice or no part of whole at all.
bool is_rank_slice(const Tensor& part, const Tensor& whole, int rank, const char* what) {
  if (!overlap(part, whole)) return false;
  const auto slice = static_cast<const char*>(whole.data) + static_cast<size_t>(rank) * part.bytes();
  ZB_CHECK(part.data == slice, what, " overlaps another rank's slice (rank ", rank, "): ", part.describe(),
           " and ", whole.describe());
  return true;
}

void check_same_kind(const Tensor& in, const Tensor& out) {
  ZB_CHECK(in.dtype == out.dtype, "in is ", in.describe(), ", out is ", out.describe());
  ZB_CHECK(in.device == out.device, "in is ", in.describe(), ", out is ", out.describe());
}

}  // namespace

bool check_reduce_scatter(const Tensor& in, const Tensor& out, int rank, int size) {
  check_same_kind(in, out);
  ZB_CHECK(in.numel() == size * out.numel(), "reduce_scatter over ", size, " ranks: in ", in.describe(),
           ", out ", out.describe());
  return is_rank_slice(out, in, rank, "reduce_scatter's out");
}

bool check_all_gather(const Tensor& in, const Tensor& out, int rank, int size) {
  check_same_kind(in, out);
  ZB_CHECK(out.numel() == size * in.numel(), "all_gather over ", size, " ranks: in ", in.describe(),
           ", out ", out.describe());
  return is_rank_slice(in, out, rank, "all_gather's in");
}

void check_root(int root, int size) {
  ZB_CHECK(root >= 0 && root < size, "root ", root, " is not a rank of ", size);
}

}  // namespace zb
