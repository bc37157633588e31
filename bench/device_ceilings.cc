#include "bench/device_ceilings.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "core/strings.h"

namespace zb {

namespace {

// The best time of `repeats` runs of `work`, on the backend's own clock, after a third of a second of runs that
// bring the clocks up from idle (an idle GPU needs a few hundred milliseconds of work before it runs at its cap).
double best_ms(Backend& backend, int repeats, const std::function<void()>& work) {
  const auto warming = std::chrono::steady_clock::now();
  for (int i = 0; std::chrono::steady_clock::now() - warming < std::chrono::milliseconds(300) && i < 1000; ++i) {
    work();
    backend.synchronize();
  }
  double best = 1e300;
  for (int i = 0; i < repeats; ++i) {
    const auto start = backend.record_event();
    work();
    const auto end = backend.record_event();
    best = std::min(best, backend.elapsed_ms(*start, *end));
  }
  return best;
}

}  // namespace

DeviceCeilings measure_device_ceilings(Backend& backend, TrackingAllocator& allocator, DType dtype) {
  DeviceCeilings c;
  // The CPU backend's loops are a reference, not tuned: their rate depends on the shape far more than on the
  // machine, so no one shape is a ceiling for the others.
  if (!backend.device().is_cuda()) return c;
  // Large enough that launch costs vanish: an 8192^3 GEMM (1.1 TFLOP) and a 1 GiB copy.
  const int64_t n = 8192;
  const int64_t copy_elements = (int64_t(1) << 30) / int64_t(dtype_size(dtype));
  {
    Buffer a = allocator.allocate({n, n}, dtype, MemoryPool::workspace);
    Buffer b = allocator.allocate({n, n}, dtype, MemoryPool::workspace);
    Buffer out = allocator.allocate({n, n}, dtype, MemoryPool::workspace);
    Tensor ta = a.view({n, n}, dtype), tb = b.view({n, n}, dtype), tout = out.view({n, n}, dtype);
    backend.fill_normal(ta, 1, 1, 0, 0.02);
    backend.fill_normal(tb, 1, 2, 0, 0.02);
    const double ms = best_ms(backend, 10, [&] { backend.matmul_forward(ta, tb, Tensor{}, tout); });
    c.flops_per_second = 2.0 * double(n) * double(n) * double(n) / (ms / 1e3);
  }
  {
    Buffer from = allocator.allocate({copy_elements}, dtype, MemoryPool::workspace);
    Buffer to = allocator.allocate({copy_elements}, dtype, MemoryPool::workspace);
    Tensor tfrom = from.view({copy_elements}, dtype), tto = to.view({copy_elements}, dtype);
    backend.fill_zero(tfrom);
    const double ms = best_ms(backend, 10, [&] { backend.copy(tfrom, tto); });
    c.bytes_per_second = 2.0 * double(tfrom.bytes()) / (ms / 1e3);
  }
  backend.synchronize();
  allocator.reset_peaks();  // the programs' peaks are their training's
  c.how = cat(dtype_name(dtype), " GEMM ", n, "^3, copy of ", copy_elements * int64_t(dtype_size(dtype)) >> 20,
              " MiB");
  return c;
}

DeviceCeilings measure_device_ceilings_or_warn(Backend& backend, TrackingAllocator& allocator, DType dtype,
                                               int rank) {
  try {
    return measure_device_ceilings(backend, allocator, dtype);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: profile, rank %d: the device's ceilings could not be measured (%s); the "
                         "summaries show no share of them\n", rank, e.what());
    return {};
  }
}

}  // namespace zb
