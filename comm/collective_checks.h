// The size and aliasing rules of the Communicator interface, checked the same way by every implementation.
// A wrong size or a partial overlap is a programming error: ZB_CHECK throws naming both tensors.
#pragma once

#include "core/tensor.h"

namespace zb {

// reduce_scatter_sum: same dtype and device, in.numel() == size * out.numel(), and out either disjoint
// from in or exactly rank's slice of in. Returns whether out is that slice (the in-place case).
bool check_reduce_scatter(const Tensor& in, const Tensor& out, int rank, int size);

// all_gather: same dtype and device, out.numel() == size * in.numel(), and in either disjoint from out or
// exactly rank's slice of out. Returns whether in is that slice (the in-place case).
bool check_all_gather(const Tensor& in, const Tensor& out, int rank, int size);

void check_root(int root, int size);

}  // namespace zb
