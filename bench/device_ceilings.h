// What a device can do at best, measured on it once before a profile (bench/profile_summary.h sets each
// operation's rate against these): a large square GEMM in the training dtype, and a large copy within the
// device's memory (its bytes read and written). Datasheet peaks are not used: what a summary calls 80% of the
// ceiling should be reachable.
#pragma once

#include "bench/profile_summary.h"
#include "core/dtype.h"
#include "core/tracking_allocator.h"
#include "kernels/backend.h"

namespace zb {

// Allocates its operands with `allocator` (a few GB on a GPU, released before it returns) and times with the
// backend's events: the best of a few repeats after a warm-up. None (zeros) on the CPU backend.
DeviceCeilings measure_device_ceilings(Backend& backend, TrackingAllocator& allocator, DType dtype);
// The same, or none (zeros) with a warning on stderr naming `rank` where they cannot be measured: a profile must
// not cost the run it observes.
DeviceCeilings measure_device_ceilings_or_warn(Backend& backend, TrackingAllocator& allocator, DType dtype,
                                               int rank);

}  // namespace zb
