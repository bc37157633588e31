// The offload CPU optimizer, at every SIMD level this CPU runs, against the CPU reference backend's
// optimizer on fresh random shards (AdamW, Adam, SGD; weight decay, a clipping factor, three steps for the
// bias corrections; a length that leaves a tail for every vector width): master, m and v to 1e-6 relative,
// and the bf16 (fp16) copy exactly the rounded master.
#include <gtest/gtest.h>

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "core/bf16.h"
#include "core/strings.h"
#include "core/f16.h"
#include "core/sixteen_bit.h"
#include "kernels/blockwise_quantization.h"
#include "kernels/cpu/cpu_ops.h"
#include "offload/cpu_optimizer.h"
#include "support/tensor_views.h"

namespace zb {
namespace {

struct Shard {
  std::vector<float> master, m, v;
  std::vector<uint16_t> grad, out;
};

Shard random_shard(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Shard s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n), std::vector<uint16_t>(n),
          std::vector<uint16_t>(n, 0xffff)};
  for (int64_t i = 0; i < n; ++i) {
    s.master[i] = 0.02f * normal(rng);
    s.grad[i] = float_to_bf16_bits(1e-3f * normal(rng));
    s.m[i] = 1e-4f * normal(rng);
    s.v[i] = 1e-7f * std::abs(normal(rng));
  }
  return s;
}

class CpuOptimizer : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(CpuOptimizer, EveryLevelMatchesTheReference) {
  const int64_t n = 100'003;  // not a multiple of 8 or 16
  OptimizerParams p;
  p.kind = GetParam();
  p.lr = 1e-3f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.7f;
  for (int level = 0; level <= int(best_simd_level()); ++level) {
    SCOPED_TRACE(simd_level_name(SimdLevel(level)));
    Shard ours = random_shard(n, 11), reference = ours;
    std::vector<float> grad_f32(n);
    for (int64_t i = 0; i < n; ++i) grad_f32[i] = bf16_bits_to_float(reference.grad[i]);
    for (int64_t step = 1; step <= 3; ++step) {
      p.step = step;
      cpu_optimizer_step({ours.master.data(), ours.grad.data(), ours.m.data(), ours.v.data(), ours.out.data(), n}, p,
                         SimdLevel(level));
      cpu::optimizer_step<float>(reference.master.data(), grad_f32.data(), reference.m.data(), reference.v.data(), n,
                                 p);
    }
    EXPECT_LE(test::relative_error(ours.master, reference.master), 1e-6);
    EXPECT_LE(test::relative_error(ours.m, reference.m), 1e-6);
    if (p.kind != OptimizerKind::sgd) {
      EXPECT_LE(test::relative_error(ours.v, reference.v), 1e-6);
    }
    // The weights moved, by far more than the tolerance (a step that did nothing could not pass above anyway,
    // unless the reference did nothing too).
    EXPECT_GT(test::relative_error(ours.master, random_shard(n, 11).master), 1e-4);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += ours.out[i] != float_to_bf16_bits(ours.master[i]);
    EXPECT_EQ(wrong, 0) << "bf16 copies that are not the rounded master";
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, CpuOptimizer,
                         ::testing::Values(OptimizerKind::adamw, OptimizerKind::adam, OptimizerKind::sgd),
                         [](const ::testing::TestParamInfo<OptimizerKind>& param_info) {
                           return std::string(optimizer_kind_name(param_info.param));
                         });

// fp16 models: the gradients read and the weights written as fp16 (the F16C and AVX-512 conversions at the
// vector levels, the host's own at the scalar level and in the tails), a gradient scale as a loss scale
// divides out, and the skipped step of an overflow writing the rounded master and nothing else.
TEST(CpuOptimizer, Fp16ModelsAtEveryLevelMatchTheReference) {
  const int64_t n = 100'003;
  OptimizerParams p;
  p.lr = 1e-3f;
  p.weight_decay = 0.1f;
  p.grad_scale = 1.0f / 1024;  // the gradients below are scaled by a loss scale of 1024
  for (int level = 0; level <= int(best_simd_level()); ++level) {
    SCOPED_TRACE(simd_level_name(SimdLevel(level)));
    Shard ours = random_shard(n, 31);
    std::mt19937 rng(32);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (uint16_t& g : ours.grad) g = float_to_f16_bits(1024 * 1e-3f * normal(rng));
    Shard reference = ours;
    std::vector<float> grad_f32(n);
    for (int64_t i = 0; i < n; ++i) grad_f32[i] = f16_bits_to_float(reference.grad[i]);
    for (int64_t step = 1; step <= 3; ++step) {
      p.step = step;
      CpuOptimizerShard shard{ours.master.data(), ours.grad.data(), ours.m.data(), ours.v.data(), ours.out.data(), n};
      shard.model = DType::f16;
      cpu_optimizer_step(shard, p, SimdLevel(level));
      cpu::optimizer_step<float>(reference.master.data(), grad_f32.data(), reference.m.data(), reference.v.data(), n,
                                 p);
    }
    EXPECT_LE(test::relative_error(ours.master, reference.master), 1e-6);
    EXPECT_LE(test::relative_error(ours.m, reference.m), 1e-6);
    EXPECT_LE(test::relative_error(ours.v, reference.v), 1e-6);
    EXPECT_GT(test::relative_error(ours.master, random_shard(n, 31).master), 1e-4);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += ours.out[i] != float_to_f16_bits(ours.master[i]);
    EXPECT_EQ(wrong, 0) << "fp16 copies that are not the rounded master";

    // A skipped step: the state stays, the copy is the rounded master again.
    const Shard before = ours;
    std::fill(ours.out.begin(), ours.out.end(), uint16_t(0xffff));
    p.skip = true;
    CpuOptimizerShard shard{ours.master.data(), ours.grad.data(), ours.m.data(), ours.v.data(), ours.out.data(), n};
    shard.model = DType::f16;
    cpu_optimizer_step(shard, p, SimdLevel(level));
    p.skip = false;
    EXPECT_EQ(ours.master, before.master);
    EXPECT_EQ(ours.m, before.m);
    EXPECT_EQ(ours.v, before.v);
    EXPECT_EQ(ours.out, before.out);
  }
}

// 8-bit moments on the host: each quantization block's update is the CPU backend's reference bit for bit,
// stochastic rounding's codes included, at every SIMD level this CPU runs (the vector levels take the whole
// blocks, the reference the partial one), for bf16 and fp16 models, with the new weights written over the
// gradients; a skipped step leaves the codes and scales as they were.
TEST(CpuOptimizer, EightBitMomentsMatchTheReferenceBitForBit) {
  const int64_t n = 5'000;  // two whole blocks and a partial one
  OptimizerParams p;
  p.lr = 1e-3f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.5f;
  for (int level = 0; level <= int(best_simd_level()); ++level)
  for (DType model : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(cat(simd_level_name(SimdLevel(level)), ", ", dtype_name(model)));
    const auto [round, widen] = sixteen_bit_conversions(model);
    Shard ours = random_shard(n, 41);
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // Gradients in the model's dtype; every seventh exactly 0 at every step, so that its first moment is 0 (whose
    // stochastic rounding picks -0's code, 128, as the reference's search does).
    for (uint16_t& g : ours.grad) g = round(1e-2f * normal(rng));
    for (int64_t i = 0; i < n; i += 7) ours.grad[i] = round(0.0f);
    std::vector<float> reference_master = ours.master, grad_f32(n);
    const int64_t blocks = quantization_blocks(n);
    std::vector<uint8_t> codes(4 * n, 0);
    std::vector<float> scales(4 * blocks, 0.0f);
    const QuantizedMoments mine{codes.data(), codes.data() + n, scales.data(), scales.data() + blocks, 9, 4096};
    const QuantizedMoments theirs{codes.data() + 2 * n, codes.data() + 3 * n, scales.data() + 2 * blocks,
                                  scales.data() + 3 * blocks, 9, 4096};
    for (int64_t step = 1; step <= 3; ++step) {
      p.step = step;
      for (int64_t i = 0; i < n; ++i) grad_f32[i] = widen(ours.grad[i]);
      CpuOptimizerShard shard{ours.master.data(), ours.grad.data(), nullptr, nullptr, ours.grad.data(), n, model};
      shard.quantized = mine;
      cpu_optimizer_step(shard, p, SimdLevel(level));
      cpu::optimizer_step_8bit(reference_master.data(), grad_f32.data(), theirs, n, p);
      EXPECT_EQ(ours.master, reference_master) << "step " << step;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(ours.grad[i], round(ours.master[i])) << "the weights written at " << i;
      for (int64_t i = 0; i < n; ++i) ours.grad[i] = round(i % 7 ? widen(ours.grad[i]) * 0.5f + 1e-2f : 0.0f);
    }
    EXPECT_TRUE(std::equal(codes.begin(), codes.begin() + 2 * n, codes.begin() + 2 * n));
    EXPECT_TRUE(std::equal(scales.begin(), scales.begin() + 2 * blocks, scales.begin() + 2 * blocks));
    const std::vector<uint8_t> codes_before = codes;
    const std::vector<float> scales_before = scales, master_before = ours.master;
    p.skip = true;
    CpuOptimizerShard skipped{ours.master.data(), ours.grad.data(), nullptr, nullptr, ours.out.data(), n, model};
    skipped.quantized = mine;
    cpu_optimizer_step(skipped, p, SimdLevel(level));
    p.skip = false;
    EXPECT_EQ(codes, codes_before);
    EXPECT_EQ(scales, scales_before);
    EXPECT_EQ(ours.master, master_before);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(ours.out[i], round(ours.master[i]));
  }
}

// Training writes the new weights over the gradient they came from (one host buffer carries both): every
// level must read each position's gradient before writing its weight there.
TEST(CpuOptimizer, WeightsWrittenOverTheGradientAreThoseOfASeparateOutput) {
  const int64_t n = 70'001;
  OptimizerParams p;
  p.weight_decay = 0.1f;
  for (int level = 0; level <= int(best_simd_level()); ++level) {
    SCOPED_TRACE(simd_level_name(SimdLevel(level)));
    Shard separate = random_shard(n, 5), in_place = separate;
    cpu_optimizer_step({separate.master.data(), separate.grad.data(), separate.m.data(), separate.v.data(),
                        separate.out.data(), n}, p, SimdLevel(level));
    cpu_optimizer_step({in_place.master.data(), in_place.grad.data(), in_place.m.data(), in_place.v.data(),
                        in_place.grad.data(), n}, p, SimdLevel(level));
    EXPECT_EQ(in_place.grad, separate.out);
    EXPECT_EQ(in_place.master, separate.master);
    EXPECT_EQ(in_place.v, separate.v);
  }
}

// n elements of T at a 64-byte boundary (where the optimizer streams its out-of-place stores), garbage.
template <typename T>
std::unique_ptr<T[], decltype(&std::free)> aligned_garbage(int64_t n) {
  const size_t bytes = (size_t(n) * sizeof(T) + 63) / 64 * 64;
  std::unique_ptr<T[], decltype(&std::free)> p(static_cast<T*>(std::aligned_alloc(64, bytes)), &std::free);
  std::memset(p.get(), 0x5A, bytes);
  return p;
}

// The speculative update reads the state from one set of arrays and writes it to another, so that a step whose
// gradients turn out to need clipping can be redone from the state it started from: the result must be the
// in-place update's, bit for bit, and the arrays read must be left as they were. Into aligned arrays the
// stores are non-temporal, into others plain: both are checked.
TEST_P(CpuOptimizer, StateWrittenAsideIsTheInPlaceUpdate) {
  const int64_t n = 50'021;
  OptimizerParams p;
  p.kind = GetParam();
  p.weight_decay = 0.1f;
  p.step = 4;
  for (int level = 0; level <= int(best_simd_level()); ++level) {
    SCOPED_TRACE(simd_level_name(SimdLevel(level)));
    const Shard start = random_shard(n, 23);
    Shard source = start;
    Shard unaligned = random_shard(n, 24);  // garbage to be overwritten (at vector's alignment)
    auto master = aligned_garbage<float>(n), m = aligned_garbage<float>(n), v = aligned_garbage<float>(n);
    auto out = aligned_garbage<uint16_t>(n);
    for (bool aligned : {false, true}) {
      SCOPED_TRACE(aligned ? "64-byte aligned" : "vector-aligned");
      CpuOptimizerShard shard{unaligned.master.data() + 1, source.grad.data(), unaligned.m.data() + 1,
                              unaligned.v.data() + 1, unaligned.out.data() + 1, n - 1};
      if (aligned) shard = {master.get(), source.grad.data(), m.get(), v.get(), out.get(), n};
      shard.master_in = source.master.data(), shard.m_in = source.m.data(), shard.v_in = source.v.data();
      if (!aligned) shard.grad = source.grad.data() + 1, shard.master_in += 1, shard.m_in += 1, shard.v_in += 1;
      cpu_optimizer_step(shard, p, SimdLevel(level));
      // The unaligned run skips element 0, to be off every boundary; its reference does too (which elements
      // take the scalar tail path, whose rounding differs from FMA's, depends on where the range starts).
      const int64_t first = aligned ? 0 : 1;
      Shard in_place = start;
      cpu_optimizer_step({in_place.master.data() + first, in_place.grad.data() + first, in_place.m.data() + first,
                          in_place.v.data() + first, in_place.out.data() + first, n - first},
                         p, SimdLevel(level));
      auto written = [&](const float* x) { return std::vector<float>(x, x + (n - first)); };
      auto expected = [&](const std::vector<float>& x) { return std::vector<float>(x.begin() + first, x.end()); };
      EXPECT_EQ(written(shard.master), expected(in_place.master));
      EXPECT_EQ(written(shard.m), expected(in_place.m));
      if (p.kind != OptimizerKind::sgd) {
        EXPECT_EQ(written(shard.v), expected(in_place.v));
      }
      EXPECT_NE(in_place.master, start.master);
      const auto* bits = static_cast<const uint16_t*>(shard.params_out);
      EXPECT_EQ(std::vector<uint16_t>(bits, bits + (n - first)),
                std::vector<uint16_t>(in_place.out.begin() + first, in_place.out.end()));
    }
    EXPECT_EQ(source.master, start.master);
    EXPECT_EQ(source.m, start.m);
    EXPECT_EQ(source.v, start.v);
  }
}

// One core of the rank's share is left to the training thread, unless OMP_NUM_THREADS says otherwise.
TEST(CpuOptimizer, ThreadsBesideTrainingLeaveACoreOfTheRanksShareUnlessOmpNumThreadsIsSet) {
  const char* before = std::getenv("OMP_NUM_THREADS");
  const std::string saved = before ? before : "";
  unsetenv("OMP_NUM_THREADS");
  const int procs = omp_get_num_procs();
  const bool bound = procs < sysconf(_SC_NPROCESSORS_ONLN);  // (this process runs on some processors only)
  EXPECT_EQ(optimizer_threads_beside_training(), std::max(1, procs - 1));
  EXPECT_EQ(optimizer_threads_beside_training(4), std::max(1, (bound ? procs : procs / 4) - 1))
      << "four ranks share the cores";
  if (!bound) {
    EXPECT_EQ(optimizer_threads_beside_training(4 * procs), 1) << "at least one thread";
  }
  setenv("OMP_NUM_THREADS", "", 1);
  EXPECT_EQ(optimizer_threads_beside_training(), std::max(1, procs - 1)) << "empty counts as unset";
  setenv("OMP_NUM_THREADS", "3", 1);  // (OpenMP read it at start: its count is the one it took then)
  EXPECT_EQ(optimizer_threads_beside_training(), omp_get_max_threads());
  EXPECT_EQ(optimizer_threads_beside_training(4), omp_get_max_threads()) << "as set, whatever the ranks";
  if (before) setenv("OMP_NUM_THREADS", saved.c_str(), 1);
  else unsetenv("OMP_NUM_THREADS");
}

TEST(CpuOptimizer, RefusesALevelTheCpuLacks) {
  if (best_simd_level() == SimdLevel::avx512) GTEST_SKIP() << "this CPU runs every level";
  const OptimizerParams p;
  std::vector<float> x(16);
  std::vector<uint16_t> g(16);
  EXPECT_THROW(cpu_optimizer_step({x.data(), g.data(), x.data(), x.data(), nullptr, 16}, p, SimdLevel::avx512), Error);
}

}  // namespace
}  // namespace zb
