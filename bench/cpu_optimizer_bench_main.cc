// cpu_optimizer_bench: parameters per second of the offload CPU optimizer (AdamW over fp32 master and
// moments, bf16 gradients in, bf16 weights out) at each SIMD level this CPU runs, to set beside PyTorch's
// fused CPU AdamW on the same machine. Memory-bound: each parameter moves 16 bytes in and 14 out.
#include <omp.h>

#include <algorithm>
#include <chrono>
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
  std::vector<float> master(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  std::vector<uint16_t> grad(n, zb::float_to_bf16_bits(1e-3f)), out(n);
  zb::OptimizerParams p;
  p.weight_decay = 0.01f;
  std::printf("cpu_optimizer_bench: AdamW over %lld parameters, %d OpenMP threads, best level %s\n", (long long)n,
              omp_get_max_threads(), std::string(zb::simd_level_name(zb::best_simd_level())).c_str());
  for (int level = 0; level <= int(zb::best_simd_level()); ++level) {
    const zb::CpuOptimizerShard shard{master.data(), grad.data(), m.data(), v.data(), out.data(), n};
    zb::cpu_optimizer_step(shard, p, zb::SimdLevel(level));  // warm-up: pages touched, threads started
    std::vector<double> seconds;
    for (int64_t r = 0; r < f.repeats; ++r) {
      p.step = r + 2;
      const auto start = std::chrono::steady_clock::now();
      zb::cpu_optimizer_step(shard, p, zb::SimdLevel(level));
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::printf("%-7s %8.2f ms per step | %6.2f G params/s | %6.1f GB/s\n",
                std::string(zb::simd_level_name(zb::SimdLevel(level))).c_str(), median * 1e3, n / median / 1e9,
                30.0 * n / median / 1e9);
  }
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
