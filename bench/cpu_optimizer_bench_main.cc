// cpu_optimizer_bench: parameters per second of the offload CPU optimizer (AdamW over fp32 master and
// moments, bf16 gradients in, bf16 weights out) at each SIMD level this CPU runs, to set beside PyTorch's
// fused CPU AdamW on the same machine. Memory-bound: each parameter reads 14 bytes (fp32 master, m, v and the
// bf16 gradient) and writes 14 (master, m, v and the bf16 weights). As in training, the weights are written
// over the gradient they came from (the offload buffer carries the gradient down and the weights up); the
// separate-output line shows what a fresh output array costs (its lines are read before they are written).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <vector>

#include "bench/cli.h"
#include "core/bf16.h"
#include "core/errors.h"
#include "offload/cpu_optimizer.h"

namespace {

struct Flags {
  int64_t params = 100'000'000;
  int64_t repeats = 10;
};

int run(const Flags& f) {
  if (f.params <= 0 || f.params > (int64_t(1) << 34)) throw zb::UsageError("--params: must be in [1, 2^34]");
  if (f.repeats <= 0 || f.repeats > 10'000) throw zb::UsageError("--repeats: must be in [1, 10000]");
  const int64_t n = f.params;
  // Filled by the threads that will update them, as the optimizer splits the range: on a host of several
  // memory nodes each thread's pages are then local to it.
  std::unique_ptr<float[]> master(new float[n]), m(new float[n]), v(new float[n]);
  std::unique_ptr<uint16_t[]> grad(new uint16_t[n]), out(new uint16_t[n]);
  const uint16_t grad_bits = zb::float_to_bf16_bits(1e-3f);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) master[i] = 0.01f, m[i] = 0, v[i] = 0, grad[i] = grad_bits, out[i] = 0;
  zb::OptimizerParams p;
  p.weight_decay = 0.01f;
  std::printf("cpu_optimizer_bench: AdamW over %lld parameters, %d OpenMP threads, best level %s\n", (long long)n,
              omp_get_max_threads(), std::string(zb::simd_level_name(zb::best_simd_level())).c_str());
  auto measure = [&](zb::SimdLevel level, void* weights_out, const char* label) {
    const zb::CpuOptimizerShard shard{master.get(), grad.get(), m.get(), v.get(), weights_out, n};
    zb::cpu_optimizer_step(shard, p, level);  // warm-up: threads started, pages mapped
    std::vector<double> seconds;
    for (int64_t r = 0; r < f.repeats; ++r) {
      p.step = r + 2;
      const auto start = std::chrono::steady_clock::now();
      zb::cpu_optimizer_step(shard, p, level);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::printf("%-7s %-15s %8.2f ms per step | %6.2f G params/s | %6.1f GB/s\n",
                std::string(zb::simd_level_name(level)).c_str(), label, median * 1e3, n / median / 1e9,
                28.0 * n / median / 1e9);
  };
  for (int level = 0; level <= int(zb::best_simd_level()); ++level) measure(zb::SimdLevel(level), grad.get(), "in place");
  measure(zb::best_simd_level(), out.get(), "separate output");
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
