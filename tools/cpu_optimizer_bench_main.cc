// cpu_optimizer_bench: parameters per second of the offload CPU optimizer (AdamW over fp32 master and
// moments, bf16 gradients in, bf16 weights out) at each SIMD level this CPU runs, to set beside PyTorch's
// fused CPU AdamW on the same machine. Memory-bound: each parameter reads 14 bytes (fp32 master, m, v and the
// bf16 gradient) and writes 14 (master, m, v and the bf16 weights). As in training, the weights are written
// over the gradient they came from (the offload buffer carries the gradient down and the weights up); the
// separate-output line shows what a fresh output array costs (its lines are read before they are written).
// The speculative line is the update of the offload strategies during backward: the state read from one set
// of arrays and written to another (non-temporal stores), with the weights in a separate array.
// The last line moves the in-place update's 28 bytes a parameter with one multiply-add an array instead of
// AdamW's arithmetic, in a plain loop compiled for the baseline instruction set: a reference for the bytes, not
// a floor. Where it is faster than AdamW the update has room left in memory; it can also be slower (it was on
// a 16-core host), and then only the optimizer lines at fewer threads
// (OMP_NUM_THREADS) tell memory from cores: a rate that barely grows with the threads is bound by memory.
// The 8-bit lines update Adam's moments kept as 8-bit codes with a scale a block (adamw8bit): 16 bytes a
// parameter (the fp32 master read and written, two codes read and written, the gradient in, the weights out).
// Arrays are page-aligned, as the host allocator's are.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "bench/cli.h"
#include "core/bf16.h"
#include "core/errors.h"
#include "kernels/optimizer_state.h"
#include "offload/cpu_optimizer.h"

namespace {

template <typename T>
using Array = std::unique_ptr<T[], decltype(&std::free)>;

template <typename T>
Array<T> page_aligned(int64_t n) {
  const size_t bytes = (size_t(n) * sizeof(T) + 4095) / 4096 * 4096;
  Array<T> array(static_cast<T*>(std::aligned_alloc(4096, bytes)), &std::free);
  if (!array) throw zb::OutOfMemory("cpu_optimizer_bench: the arrays do not fit in host memory");
  return array;
}

// Reads and writes what the in-place update does (fp32 master, m and v; the bf16 gradient, replaced by the
// weights' upper halves), each with a multiply-add the compiler vectorises.
void same_traffic_as_the_update(float* master, float* m, float* v, uint16_t* grad_then_weights, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = zb::bf16_bits_to_float(grad_then_weights[i]);
    master[i] = master[i] * 0.999f + g;
    m[i] = m[i] * 0.9f + g;
    v[i] = v[i] * 0.95f + g;
    grad_then_weights[i] = uint16_t(std::bit_cast<uint32_t>(master[i]) >> 16);
  }
}

struct Flags {
  int64_t params = 100'000'000;
  int64_t repeats = 10;
};

int run(const Flags& f) {
  if (f.params <= 0 || f.params > (int64_t(1) << 34)) throw zb::UsageError("--params: must be in [1, 2^34]");
  if (f.repeats <= 0 || f.repeats > 10'000) throw zb::UsageError("--repeats: must be in [1, 10000]");
  const int64_t n = f.params;
  // First touched by all threads (the optimizer hands out its chunks dynamically, so no split is its own).
  Array<float> master = page_aligned<float>(n), m = page_aligned<float>(n), v = page_aligned<float>(n);
  Array<float> spare_master = page_aligned<float>(n), spare_m = page_aligned<float>(n), spare_v = page_aligned<float>(n);
  Array<uint16_t> grad = page_aligned<uint16_t>(n), out = page_aligned<uint16_t>(n);
  // Gradients that vary along a block, as real ones do (8-bit moments quantize each element against the block's
  // largest: equal gradients would all be the largest).
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t grad_bits = zb::float_to_bf16_bits(1e-3f * float(1 + i % 97) / 97.0f);
    master[i] = 0.01f, m[i] = 0, v[i] = 0, grad[i] = grad_bits, out[i] = 0;
    spare_master[i] = 0, spare_m[i] = 0, spare_v[i] = 0;
  }
  zb::OptimizerParams p;
  p.weight_decay = 0.01f;
  std::printf("cpu_optimizer_bench: AdamW over %lld parameters, %d OpenMP threads, best level %s\n", (long long)n,
              omp_get_max_threads(), std::string(zb::simd_level_name(zb::best_simd_level())).c_str());
  // Times `step` (the median of the repeats after one warm-up, which starts the threads and maps the pages) and
  // prints its line; step(r) runs repeat r (0: the warm-up).
  auto time_line = [&](const std::string& kind, const char* label, const std::function<void(int64_t)>& step,
                       double bytes_per_param = 28.0) {
    step(0);
    std::vector<double> seconds;
    for (int64_t r = 1; r <= f.repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      step(r);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::printf("%-7s %-22s %8.2f ms per step | %6.2f G params/s | %6.1f GB/s\n", kind.c_str(), label, median * 1e3,
                n / median / 1e9, bytes_per_param * n / median / 1e9);
  };
  auto measure = [&](zb::SimdLevel level, void* weights_out, const char* label, bool aside = false) {
    zb::CpuOptimizerShard shard{master.get(), grad.get(), m.get(), v.get(), weights_out, n};
    if (aside) {
      shard = {spare_master.get(), grad.get(), spare_m.get(), spare_v.get(), weights_out, n};
      shard.master_in = master.get(), shard.m_in = m.get(), shard.v_in = v.get();
    }
    time_line(std::string(zb::simd_level_name(level)), label, [&](int64_t r) {
      p.step = r + 1;
      zb::cpu_optimizer_step(shard, p, level);
    });
  };
  for (int level = 0; level <= int(zb::best_simd_level()); ++level) measure(zb::SimdLevel(level), grad.get(), "in place");
  measure(zb::best_simd_level(), out.get(), "separate output");
  measure(zb::best_simd_level(), out.get(), "aside (speculative)", /*aside=*/true);
  // 8-bit moments: codes and scales laid out as the offload strategies keep them (kernels/optimizer_state.h).
  const zb::OptimizerStateFormat eight_bit{true, true};
  Array<unsigned char> moments = page_aligned<unsigned char>(int64_t(eight_bit.moment_bytes(n))),
                       spare_moments = page_aligned<unsigned char>(int64_t(eight_bit.moment_bytes(n)));
  std::fill_n(moments.get(), eight_bit.moment_bytes(n), 0);
  std::fill_n(spare_moments.get(), eight_bit.moment_bytes(n), 0);
  auto measure_8bit = [&](const char* label, bool aside) {
    zb::CpuOptimizerShard shard{master.get(), grad.get(), nullptr, nullptr, grad.get(), n};
    shard.quantized = zb::moment_pointers(moments.get(), n, eight_bit).quantized;
    if (aside) {
      shard.master = spare_master.get(), shard.params_out = out.get(), shard.master_in = master.get();
      shard.quantized_in = shard.quantized;
      shard.quantized = zb::moment_pointers(spare_moments.get(), n, eight_bit).quantized;
    }
    time_line("8-bit", label, [&](int64_t r) {
      p.step = r + 1;
      zb::cpu_optimizer_step(shard, p);
    }, 16.0);
  };
  measure_8bit("in place", false);
  measure_8bit("aside (speculative)", true);
  time_line("memory", "same bytes, no AdamW",
            [&](int64_t) { same_traffic_as_the_update(master.get(), m.get(), v.get(), grad.get(), n); });
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  namespace po = boost::program_options;
  po::options_description options("cpu_optimizer_bench options");
  options.add_options()("params", po::value(&f.params)->default_value(f.params), "parameters in the shard")(
      "repeats", po::value(&f.repeats)->default_value(f.repeats), "timed steps per level (the median is shown)");
  return zb::run_program(argc, argv,
                         "usage: cpu_optimizer_bench [options]\nParameters per second of the offload CPU optimizer.",
                         options, [&] { return run(f); });
}
