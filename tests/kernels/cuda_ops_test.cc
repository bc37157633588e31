// Every CUDA op against the CPU reference, on fresh random inputs, in fp32 (relative error at most 1e-5), bf16
// (at most 2e-2) and fp16 (at most 5e-3). Outputs start as NaN, so an element the kernel does not write fails the
// comparison; outputs that the contract says are added to start from the same random values on both sides. Parameter
// gradients run both ways: added to random values, and overwritten (GradWrite::overwrite) over NaN, which
// any read of the old values would carry into the result. The CPU side
// receives the inputs exactly as the GPU holds them (rounded to bf16 or fp16 in those runs). Skipped without a GPU.
#include "kernels/cuda/cuda_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "core/cuda_check.h"
#include "core/strings.h"
#include "core/trace.h"
#include "kernels/blockwise_quantization.h"
#include "kernels/clip_factor.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_dtype.h"
#include "kernels/cuda/gemm_algorithm_timing.h"
#include "kernels/device_activity.h"
#include "support/cuda_fixture.h"

#ifdef ZB_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace zb {
namespace {

using test::relative_error;
using test::view;

// Binds a temporary view to the Tensor& of an output argument for the duration of one call.
Tensor& out(Tensor&& t) {
  return t;
}

class CudaOps : public ::testing::TestWithParam<DType>, protected test::CudaFixture {
 protected:
  void SetUp() override {
    if (!start()) GTEST_SKIP() << "no CUDA GPU";
  }
  DType dt() const { return GetParam(); }
  std::vector<float> normal(int64_t n, double std = 1.0, double mean = 0.0) {
    return representable(rnd.normal<float>(n, std, mean), dt());
  }
  Tensor up(const std::vector<float>& host, Shape shape) { return upload(host, shape, dt()); }
  // One shape of the op against the CPU (the TEST_Ps below list the shapes).
  void layernorm_case(int64_t n, int64_t c, GradWrite write);
  void rmsnorm_case(int64_t n, int64_t c, GradWrite write, float gain_offset = 0.0f);
  void qk_norm_case(const AttentionShape& s, GradWrite write);
  void residual_norms_case(int64_t n, int64_t c);
  // A parameter gradient's starting value on the GPU: the host values to add to, or NaN to overwrite.
  Tensor grad_start(const std::vector<float>& host, Shape shape, GradWrite write) {
    return write == GradWrite::add ? up(host, shape) : poisoned(shape, dt());
  }
  void cross_entropy_case(int64_t n, int64_t padded, int64_t vocab);
  void embedding_case(int64_t n, int64_t v, int64_t c);
  void expect_close(const Tensor& gpu_result, const std::vector<float>& reference, const char* what) {
    EXPECT_LE(relative_error(download(gpu_result), reference), tolerance(gpu_result.dtype)) << what;
  }

  test::RandomInputs rnd;
  ::testing::ScopedTrace trace{__FILE__, __LINE__, rnd.trace()};
};

// 8 columns a thread where rows are whole 16-byte vectors (136: fewer vectors than a warp's lanes, 600: more),
// one otherwise (36).
TEST_P(CudaOps, EmbeddingForwardAndBackward) {
  for (const int64_t c : {136, 600, 36}) embedding_case(300, 97, c);
}

void CudaOps::embedding_case(int64_t n, int64_t v, int64_t c) {
  SCOPED_TRACE(cat(c, " columns"));
  auto ids = rnd.ids(n, int32_t(v));
  auto table = normal(v * c), dout = normal(n * c), dtable = normal(v * c), base = normal(n * c);
  std::vector<float> ref(n * c), ref_acc = base, ref_dtable = dtable;
  cpu.embedding_forward(view(ids), view(table, {v, c}), out(view(ref, {n, c})), false);
  cpu.embedding_forward(view(ids), view(table, {v, c}), out(view(ref_acc, {n, c})), true);
  std::vector<float> ref_written = dtable;
  cpu.embedding_backward(view(ids), view(dout, {n, c}), out(view(ref_dtable, {v, c})));
  cpu.embedding_backward(view(ids), view(dout, {n, c}), out(view(ref_written, {v, c})), GradWrite::overwrite);

  const Tensor g_ids = upload_ids(ids), g_table = up(table, {v, c});
  Tensor g_out = poisoned({n, c}, dt()), g_acc = up(base, {n, c}), g_dtable = up(dtable, {v, c});
  Tensor g_written = poisoned({v, c}, dt());
  gpu->embedding_forward(g_ids, g_table, g_out, false);
  gpu->embedding_forward(g_ids, g_table, g_acc, true);
  gpu->embedding_backward(g_ids, up(dout, {n, c}), g_dtable);
  gpu->embedding_backward(g_ids, up(dout, {n, c}), g_written, GradWrite::overwrite);
  expect_close(g_out, ref, "embedding");
  expect_close(g_acc, ref_acc, "embedding, accumulating");
  expect_close(g_dtable, ref_dtable, "embedding table gradient");
  expect_close(g_written, ref_written, "embedding table gradient, overwritten");
}

// Widths that take each path. Teams (ZB_NORM_ROWS=teams): one vector a thread with idle threads in the last
// warp (200, 1280, 1600) and without (768), two a thread (3000: 375 vectors over 192 threads); rows too wide
// for a team (14400) take the warps' kernels. Warps: the fused backward with 8 warps a block (200, 768, 1280,
// 1600, where some lanes idle in the last 256-column step), with 4 (3000: two outputs of 3000 floats per warp),
// and the unfused one for rows too wide for any warp's shared slice (14400). Either way rows not 16-byte
// aligned (201) take the scalar kernels. Row counts leave a partial chunk of 32 (and teams without rows).
TEST_P(CudaOps, LayerNormForwardAndBackward) {
  for (const NormRows rows : {NormRows::teams, NormRows::warps}) {
    SCOPED_TRACE(rows == NormRows::teams ? "teams" : "warps");
    use(&BackendOptions::norm_rows, rows);
    for (const auto& [n, c] :
         {std::pair<int64_t, int64_t>{77, 200}, {40, 768}, {41, 1280}, {45, 1600}, {40, 3000}, {33, 201}, {5, 14400}}) {
      SCOPED_TRACE(cat(n, " x ", c));
      layernorm_case(n, c, GradWrite::add);
      layernorm_case(n, c, GradWrite::overwrite);
    }
  }
}

void CudaOps::layernorm_case(int64_t n, int64_t c, GradWrite write) {
  SCOPED_TRACE(write == GradWrite::add ? "gradients added" : "gradients overwritten");
  auto x = normal(n * c, 2.0, 0.5), w = normal(c, 0.3, 1.0), b = normal(c), dout = normal(n * c);
  auto dx = normal(n * c), dw = normal(c), db = normal(c);
  std::vector<float> y(n * c), mean(n), rstd(n), rdx = dx, rdw = dw, rdb = db;
  cpu.layernorm_forward(view(x, {n, c}), view(w, {c}), view(b, {c}), 1e-5f, out(view(y, {n, c})), out(view(mean, {n})),
                        out(view(rstd, {n})));
  cpu.layernorm_backward(view(dout, {n, c}), view(x, {n, c}), view(w, {c}), view(mean, {n}), view(rstd, {n}),
                         out(view(rdx, {n, c})), out(view(rdw, {c})), out(view(rdb, {c})), write);

  const Tensor gx = up(x, {n, c}), gw = up(w, {c});
  Tensor gy = poisoned({n, c}, dt()), gmean = poisoned({n}, DType::f32), grstd = poisoned({n}, DType::f32);
  gpu->layernorm_forward(gx, gw, up(b, {c}), 1e-5f, gy, gmean, grstd);
  Tensor gdx = up(dx, {n, c}), gdw = grad_start(dw, {c}, write), gdb = grad_start(db, {c}, write);
  gpu->layernorm_backward(up(dout, {n, c}), gx, gw, gmean, grstd, gdx, gdw, gdb, write);
  expect_close(gy, y, "layernorm output");
  EXPECT_LE(relative_error(download(gmean), mean), 1e-5);
  EXPECT_LE(relative_error(download(grstd), rstd), 1e-5);
  expect_close(gdx, rdx, "layernorm dx");
  expect_close(gdw, rdw, "layernorm dweight");
  expect_close(gdb, rdb, "layernorm dbias");
}

// 136 columns: a team of one warp, 15 lanes idle; 3000: two vectors a thread.
TEST_P(CudaOps, ResidualAddFusedIntoTheNorms) {
  for (const NormRows rows : {NormRows::teams, NormRows::warps}) {
    use(&BackendOptions::norm_rows, rows);
    for (const auto& [n, c] : {std::pair<int64_t, int64_t>{70, 136}, {9, 3000}}) {
      SCOPED_TRACE(cat(rows == NormRows::teams ? "teams, " : "warps, ", n, " x ", c));
      residual_norms_case(n, c);
    }
  }
}

void CudaOps::residual_norms_case(int64_t n, int64_t c) {
  auto a = normal(n * c), b = normal(n * c), w = normal(c, 0.3, 1.0), bias = normal(c);
  std::vector<float> sum(n * c), y(n * c), mean(n), rstd(n), y_rms(n * c), rstd_rms(n);
  cpu.residual_layernorm_forward(view(a, {n, c}), view(b, {n, c}), out(view(sum, {n, c})), view(w, {c}),
                                 view(bias, {c}), 1e-5f, out(view(y, {n, c})), out(view(mean, {n})),
                                 out(view(rstd, {n})));
  std::vector<float> stored_sum = representable(sum, dt());  // the sum as the GPU stores it
  cpu.rmsnorm_forward(view(stored_sum, {n, c}), view(w, {c}), 1e-5f, out(view(y_rms, {n, c})),
                      out(view(rstd_rms, {n})));
  const Tensor ga = up(a, {n, c}), gb = up(b, {n, c}), gw = up(w, {c});
  Tensor g_sum = poisoned({n, c}, dt()), gy = poisoned({n, c}, dt()), g_mean = poisoned({n}, DType::f32);
  Tensor g_rstd = poisoned({n}, DType::f32), g_sum2 = poisoned({n, c}, dt()), gy_rms = poisoned({n, c}, dt());
  Tensor g_rstd_rms = poisoned({n}, DType::f32);
  gpu->residual_layernorm_forward(ga, gb, g_sum, gw, up(bias, {c}), 1e-5f, gy, g_mean, g_rstd);
  gpu->residual_rmsnorm_forward(ga, gb, g_sum2, gw, 1e-5f, gy_rms, g_rstd_rms);
  expect_close(g_sum, sum, "residual sum");
  EXPECT_EQ(download(g_sum), download(g_sum2)) << "both fused norms store the same residual";
  // The norm reads the sum as stored (rounded to bf16 in bf16 runs).
  std::vector<float> y_stored(n * c), mean_stored(n), rstd_stored(n);
  cpu.layernorm_forward(view(stored_sum, {n, c}), view(w, {c}), view(bias, {c}), 1e-5f, out(view(y_stored, {n, c})),
                        out(view(mean_stored, {n})), out(view(rstd_stored, {n})));
  expect_close(gy, dt() == DType::f32 ? y : y_stored, "fused layernorm");
  expect_close(gy_rms, y_rms, "fused rmsnorm");
  EXPECT_LE(relative_error(download(g_rstd_rms), rstd_rms), 1e-5);
}

TEST_P(CudaOps, RmsNormForwardAndBackward) {
  // Teams: one vector a thread (128: half a warp idle; 1000, 2048), two (4096: every thread; 4000: 250 of 256);
  // too wide for a team (8200). Warps: fused (128 ... 8200), unfused (29000). Scalar either way (60).
  for (const NormRows rows : {NormRows::teams, NormRows::warps}) {
    SCOPED_TRACE(rows == NormRows::teams ? "teams" : "warps");
    use(&BackendOptions::norm_rows, rows);
    for (const auto& [n, c] : {std::pair<int64_t, int64_t>{65, 128},
                               {37, 1000},
                               {34, 2048},
                               {17, 4096},
                               {33, 4000},
                               {20, 8200},
                               {9, 60},
                               {3, 29000}}) {
      SCOPED_TRACE(cat(n, " x ", c));
      rmsnorm_case(n, c, GradWrite::add);
      rmsnorm_case(n, c, GradWrite::overwrite);
    }
  }
}

void CudaOps::rmsnorm_case(int64_t n, int64_t c, GradWrite write, float gain_offset) {
  SCOPED_TRACE(write == GradWrite::add ? "gradients added" : "gradients overwritten");
  // With Gemma's offset the weights lie near 0 (gains 1 + w), as they start.
  auto x = normal(n * c, 1.5), w = normal(c, 0.3, gain_offset == 0 ? 1.0 : 0.0), dout = normal(n * c);
  auto dx = normal(n * c), dw = normal(c);
  std::vector<float> y(n * c), rstd(n), rdx = dx, rdw = dw;
  cpu.rmsnorm_forward(view(x, {n, c}), view(w, {c}), 1e-6f, out(view(y, {n, c})), out(view(rstd, {n})), gain_offset);
  cpu.rmsnorm_backward(view(dout, {n, c}), view(x, {n, c}), view(w, {c}), view(rstd, {n}), out(view(rdx, {n, c})),
                       out(view(rdw, {c})), write, gain_offset);
  const Tensor gx = up(x, {n, c}), gw = up(w, {c});
  Tensor gy = poisoned({n, c}, dt()), grstd = poisoned({n}, DType::f32);
  gpu->rmsnorm_forward(gx, gw, 1e-6f, gy, grstd, gain_offset);
  Tensor gdx = up(dx, {n, c}), gdw = grad_start(dw, {c}, write);
  gpu->rmsnorm_backward(up(dout, {n, c}), gx, gw, grstd, gdx, gdw, write, gain_offset);
  expect_close(gy, y, "rmsnorm output");
  expect_close(gdx, rdx, "rmsnorm dx");
  expect_close(gdw, rdw, "rmsnorm dweight");
}

// Gemma's RMSNorm gain 1 + w on every path (teams and warps, fused and unfused, vectorised and scalar), and the
// residual norm's: the offset is added to the weight in fp32 as it is read.
TEST_P(CudaOps, RmsNormWithAGainOffset) {
  for (const NormRows rows : {NormRows::teams, NormRows::warps}) {
    SCOPED_TRACE(rows == NormRows::teams ? "teams" : "warps");
    use(&BackendOptions::norm_rows, rows);
    for (const auto& [n, c] : {std::pair<int64_t, int64_t>{65, 1152}, {17, 4096}, {20, 8200}, {9, 60}, {3, 29000}}) {
      SCOPED_TRACE(cat(n, " x ", c));
      rmsnorm_case(n, c, GradWrite::add, 1.0f);
      rmsnorm_case(n, c, GradWrite::overwrite, 1.0f);
    }
    const int64_t n = 33, c = 1152;
    auto a = normal(n * c), b = normal(n * c), w = normal(c, 0.3);
    std::vector<float> sum(n * c), y(n * c), rstd(n);
    cpu.residual_rmsnorm_forward(view(a, {n, c}), view(b, {n, c}), out(view(sum, {n, c})), view(w, {c}), 1e-6f,
                                 out(view(y, {n, c})), out(view(rstd, {n})), 1.0f);
    std::vector<float> stored = representable(sum, dt()), y_stored(n * c), rstd_stored(n);
    cpu.rmsnorm_forward(view(stored, {n, c}), view(w, {c}), 1e-6f, out(view(y_stored, {n, c})),
                        out(view(rstd_stored, {n})), 1.0f);
    Tensor g_sum = poisoned({n, c}, dt()), gy = poisoned({n, c}, dt()), g_rstd = poisoned({n}, DType::f32);
    gpu->residual_rmsnorm_forward(up(a, {n, c}), up(b, {n, c}), g_sum, up(w, {c}), 1e-6f, gy, g_rstd, 1.0f);
    expect_close(g_sum, sum, "residual sum");
    expect_close(gy, y_stored, "fused rmsnorm with a gain offset");
  }
}

// Gemma 3's q/k norms: head sizes 64 and 256 take the column reduction's vectors for the gains' gradients, 12
// its scalar kernel; grouped-query heads (4 over 2) and multi-query (8 over 1).
TEST_P(CudaOps, QkNormForwardAndBackward) {
  for (const AttentionShape& s :
       {AttentionShape{2, 19, 4, 2, 64}, AttentionShape{1, 7, 3, 1, 12}, AttentionShape{1, 40, 8, 1, 256}}) {
    SCOPED_TRACE(cat("T", s.seq, " H", s.heads, " KV", s.kv_heads, " D", s.head_dim));
    qk_norm_case(s, GradWrite::add);
    qk_norm_case(s, GradWrite::overwrite);
  }
}

void CudaOps::qk_norm_case(const AttentionShape& s, GradWrite write) {
  SCOPED_TRACE(write == GradWrite::add ? "gradients added" : "gradients overwritten");
  const Shape qkv{s.tokens(), s.qkv_width()}, gain{s.head_dim}, stats{s.tokens(), s.heads + s.kv_heads};
  auto x = normal(qkv.numel(), 1.5), qw = normal(s.head_dim, 0.3), kw = normal(s.head_dim, 0.3);
  auto dout = normal(qkv.numel()), dq = normal(s.head_dim), dk = normal(s.head_dim);
  std::vector<float> y(qkv.numel()), rstd(stats.numel()), dx(qkv.numel()), rdq = dq, rdk = dk;
  cpu.qk_norm_forward(view(x, qkv), view(qw, gain), view(kw, gain), 1e-6f, 1.0f, s, out(view(y, qkv)),
                      out(view(rstd, stats)));
  cpu.qk_norm_backward(view(dout, qkv), view(x, qkv), view(qw, gain), view(kw, gain), view(rstd, stats), 1.0f, s,
                       out(view(dx, qkv)), out(view(rdq, gain)), out(view(rdk, gain)), write);
  const Tensor gx = up(x, qkv), gqw = up(qw, gain), gkw = up(kw, gain);
  Tensor gy = poisoned(qkv, dt()), grstd = poisoned(stats, DType::f32), gdx = poisoned(qkv, dt());
  Tensor gdq = grad_start(dq, gain, write), gdk = grad_start(dk, gain, write);
  gpu->qk_norm_forward(gx, gqw, gkw, 1e-6f, 1.0f, s, gy, grstd);
  gpu->qk_norm_backward(up(dout, qkv), gx, gqw, gkw, grstd, 1.0f, s, gdx, gdq, gdk, write);
  expect_close(gy, y, "qk_norm output");
  EXPECT_LE(relative_error(download(grstd), rstd), 1e-5) << "qk_norm rstd";
  expect_close(gdx, dx, "qk_norm dqkv");
  expect_close(gdq, rdq, "q_norm dweight");
  expect_close(gdk, rdk, "k_norm dweight");
  // Frozen gains (LoRA): the input's gradient alone, the same.
  Tensor frozen_dx = poisoned(qkv, dt()), none;
  gpu->qk_norm_backward(up(dout, qkv), gx, gqw, gkw, grstd, 1.0f, s, frozen_dx, none, none, write);
  EXPECT_EQ(download(frozen_dx), download(gdx));
}

// Gemma's MLP activation (f = 72: 16-byte vectors; 20: in fp32 only) and the embeddings' scale (in place or not;
// 34 is sqrt(1152) as bf16 rounds it).
TEST_P(CudaOps, GegluAndScale) {
  for (const int64_t f : {72, 20}) {
    SCOPED_TRACE(cat("f = ", f));
    const int64_t n = 50;
    const Shape sh{n, f}, sh2{n, 2 * f};
    auto x2 = normal(n * 2 * f, 2.0), d = normal(n * f);
    std::vector<float> geglu(n * f), dgeglu(n * 2 * f), scaled(n * f);
    cpu.geglu_forward(view(x2, sh2), out(view(geglu, sh)));
    cpu.geglu_backward(view(d, sh), view(x2, sh2), out(view(dgeglu, sh2)));
    cpu.scale(view(d, sh), 34.0, out(view(scaled, sh)));
    Tensor o1 = poisoned(sh, dt()), o2 = poisoned(sh2, dt()), o3 = poisoned(sh, dt()), in_place = up(d, sh);
    gpu->geglu_forward(up(x2, sh2), o1);
    gpu->geglu_backward(up(d, sh), up(x2, sh2), o2);
    gpu->scale(up(d, sh), 34.0, o3);
    gpu->scale(in_place, 34.0, in_place);
    expect_close(o1, geglu, "geglu");
    expect_close(o2, dgeglu, "geglu backward");
    expect_close(o3, scaled, "scale");
    EXPECT_EQ(download(in_place), download(o3)) << "scaled in place";
  }
}

struct MatmulCase {
  int64_t n, k, m;
  bool bias;
};

// Each case runs with cuBLASLt's GELU epilogues and with the backend's own kernels instead, each with timed and
// with heuristic algorithm choices. Timing runs every candidate on the operands (into a scratch C when the GEMM
// accumulates): the accumulating weight gradients below start from random values, so a trial that wrote into
// them would show. A timed shape's first backward runs on one stream while it is timed, the later ones put the
// weight gradient on the second: each case runs the backwards twice, so both ways are checked.
class CudaMatmul : public CudaOps {
 protected:
  void run(const MatmulCase& mc) {
    for (const GemmAlgorithms algorithms : {GemmAlgorithms::timed, GemmAlgorithms::heuristic}) {
      use(&BackendOptions::gemm_algorithms, algorithms);
      for (const GemmEpilogues epilogues : {GemmEpilogues::fused, GemmEpilogues::kernels}) {
        SCOPED_TRACE(testing::Message() << (epilogues == GemmEpilogues::fused ? "cuBLASLt epilogues" : "own kernels")
                                        << (algorithms == GemmAlgorithms::timed ? ", timed" : ", heuristic"));
        use(&BackendOptions::gemm_epilogues, epilogues);
        for (const GradWrite write : {GradWrite::add, GradWrite::overwrite}) {
          SCOPED_TRACE(write == GradWrite::add ? "gradients added" : "gradients overwritten");
          run_once(mc, write);
          run_gelu_backward(mc, write);
        }
      }
    }
  }

  void run_once(const MatmulCase& mc, GradWrite write) {
    const auto [n, k, m, with_bias] = mc;
    auto x = normal(n * k), w = normal(m * k, 0.2), b = normal(m), dout = normal(n * m);
    auto dw = normal(m * k), db = normal(m);
    std::vector<float> y(n * m), dx(n * k), rdw = dw, rdb = db, pre(n * m), act(n * m);
    const Tensor no_bias;
    cpu.matmul_forward(view(x, {n, k}), view(w, {m, k}), with_bias ? view(b, {m}) : no_bias, out(view(y, {n, m})));
    cpu.matmul_gelu_forward(view(x, {n, k}), view(w, {m, k}), with_bias ? view(b, {m}) : no_bias,
                            out(view(pre, {n, m})), out(view(act, {n, m})));
    cpu.matmul_backward(view(dout, {n, m}), view(x, {n, k}), view(w, {m, k}), out(view(dx, {n, k})),
                        out(view(rdw, {m, k})), with_bias ? out(view(rdb, {m})) : out(Tensor{}), write);
    const Tensor gx = up(x, {n, k}), gw = up(w, {m, k});
    Tensor gy = poisoned({n, m}, dt()), gdx = poisoned({n, k}, dt()), gdw = grad_start(dw, {m, k}, write);
    Tensor gdb = grad_start(db, {m}, write);
    Tensor gpre = poisoned({n, m}, dt()), gact = poisoned({n, m}, dt());
    gpu->matmul_forward(gx, gw, with_bias ? up(b, {m}) : no_bias, gy);
    gpu->matmul_gelu_forward(gx, gw, with_bias ? up(b, {m}) : no_bias, gpre, gact);
    Tensor no_grad;
    gpu->matmul_backward(up(dout, {n, m}), gx, gw, gdx, gdw, with_bias ? gdb : no_grad, write);
    expect_close(gy, y, "matmul output");
    expect_close(gpre, pre, "matmul_gelu pre-activation");
    expect_close(gact, act, "matmul_gelu output (tanh GELU)");
    expect_close(gdx, dx, "matmul dinp");
    expect_close(gdw, rdw, "matmul dweight");
    if (with_bias || write == GradWrite::add) expect_close(gdb, rdb, "matmul dbias");  // else left alone: NaN
  }

  // The backward of a linear layer fed by GELU(pre) (the MLP's output projection): dpre, dweight, dbias.
  void run_gelu_backward(const MatmulCase& mc, GradWrite write) {
    const auto [n, k, m, with_bias] = mc;
    auto x = normal(n * k), pre = normal(n * k, 1.5), w = normal(m * k, 0.2), dout = normal(n * m);
    auto dw = normal(m * k), db = normal(m);
    std::vector<float> dpre(n * k), rdw = dw, rdb = db;
    cpu.matmul_gelu_backward(view(dout, {n, m}), view(x, {n, k}), view(w, {m, k}), view(pre, {n, k}),
                             out(view(dpre, {n, k})), out(view(rdw, {m, k})),
                             with_bias ? out(view(rdb, {m})) : out(Tensor{}), write);
    Tensor gdpre = poisoned({n, k}, dt()), gdw = grad_start(dw, {m, k}, write), gdb = grad_start(db, {m}, write);
    Tensor no_grad;
    gpu->matmul_gelu_backward(up(dout, {n, m}), up(x, {n, k}), up(w, {m, k}), up(pre, {n, k}), gdpre, gdw,
                              with_bias ? gdb : no_grad, write);
    expect_close(gdpre, dpre, "matmul_gelu_backward dpre");
    expect_close(gdw, rdw, "matmul_gelu_backward dweight");
    if (with_bias || write == GradWrite::add) expect_close(gdb, rdb, "matmul_gelu_backward dbias");
  }
};

// A frozen weight (empty dweight): the input's gradient alone, as the full backward gives it, and the bias's.
TEST_P(CudaMatmul, FrozenWeightGetsNoGradient) {
  const int64_t n = 96, k = 64, m = 48;
  auto x = normal(n * k), w = normal(m * k, 0.2), dout = normal(n * m), db = normal(m);
  std::vector<float> dx(n * k), rdb = db;
  Tensor none;
  cpu.matmul_backward(view(dout, {n, m}), view(x, {n, k}), view(w, {m, k}), out(view(dx, {n, k})), none,
                      out(view(rdb, {m})), GradWrite::add);
  for (const bool gelu : {false, true}) {
    SCOPED_TRACE(gelu ? "with the GELU's backward" : "plain");
    Tensor gdx = poisoned({n, k}, dt()), gdb = up(db, {m});
    if (gelu) {
      auto pre = normal(n * k, 1.5);
      std::vector<float> dpre(n * k), rdb2 = db;
      cpu.matmul_gelu_backward(view(dout, {n, m}), view(x, {n, k}), view(w, {m, k}), view(pre, {n, k}),
                               out(view(dpre, {n, k})), none, out(view(rdb2, {m})), GradWrite::add);
      gpu->matmul_gelu_backward(up(dout, {n, m}), up(x, {n, k}), up(w, {m, k}), up(pre, {n, k}), gdx, none, gdb,
                                GradWrite::add);
      expect_close(gdx, dpre, "dpre");
      expect_close(gdb, rdb2, "dbias");
    } else {
      gpu->matmul_backward(up(dout, {n, m}), up(x, {n, k}), up(w, {m, k}), gdx, none, gdb, GradWrite::add);
      expect_close(gdx, dx, "dinp");
      expect_close(gdb, rdb, "dbias");
    }
  }
}

// The LoRA products: every transpose of each operand, written or added to, scaled (ranks 16 and 5: an odd inner
// size among them).
TEST_P(CudaMatmul, GemmOfEveryTransposeScaledAndAccumulated) {
  for (const auto& [rows, inner, cols] : {std::tuple<int64_t, int64_t, int64_t>{256, 64, 16}, {128, 16, 96},
                                         {16, 256, 80}, {40, 5, 24}}) {
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const bool accumulate : {false, true}) {
          SCOPED_TRACE(testing::Message() << rows << "x" << inner << "x" << cols << (ta ? " a^T" : "")
                                          << (tb ? " b^T" : "") << (accumulate ? " accumulated" : ""));
          auto a = normal(rows * inner), b = normal(inner * cols), c = normal(rows * cols);
          const Shape sa = ta ? Shape{inner, rows} : Shape{rows, inner}, sb = tb ? Shape{cols, inner} : Shape{inner, cols};
          std::vector<float> reference = c;
          cpu.gemm(view(a, sa), ta, view(b, sb), tb, 1.75, accumulate, out(view(reference, {rows, cols})));
          Tensor gc = accumulate ? up(c, {rows, cols}) : poisoned({rows, cols}, dt());
          gpu->gemm(up(a, sa), ta, up(b, sb), tb, 1.75, accumulate, gc);
          expect_close(gc, reference, "gemm");
        }
  }
}

// LoRA's dropout mask: the GPU drops the CPU's elements (one Philox rule; n not a multiple of the GPU's groups
// of four) and keeps the others exactly, in place too.
TEST_P(CudaOps, DropoutMaskDropsTheCpusElements) {
  const int64_t n = 70'001;
  auto x = normal(n);
  std::vector<float> reference(n);
  cpu.dropout_mask(view(x, {n}), 0.1, 1234, 56, out(view(reference, {n})));
  Tensor gx = up(x, {n}), gout = poisoned({n}, dt());
  gpu->dropout_mask(gx, 0.1, 1234, 56, gout);
  EXPECT_EQ(download(gout), reference);
  gpu->dropout_mask(gx, 0.1, 1234, 56, gx);  // in place
  EXPECT_EQ(download(gx), reference);
}

TEST_P(CudaMatmul, AlignedWithBias) {
  run({256, 192, 320, true});
}
TEST_P(CudaMatmul, OddShapesWithoutBias) {
  run({37, 29, 45, false});
}
TEST_P(CudaMatmul, OddShapesWithBias) {
  run({70, 24, 19, true});
}
// The GPT-2 MLP's shape class (k a multiple of 8, large n), where the epilogues are used in training.
TEST_P(CudaMatmul, MlpShapeWithBias) {
  run({1024, 256, 1024, true});
  // In bf16 and fp16 the GELU's backward took cuBLASLt's DGELU epilogue there (the training path), not the kernel.
  if (dt() != DType::f32) {
    EXPECT_GT(gpu->epilogue_use().gelu_backward_epilogue, 0);
  }
}

// Two layers' backwards back to back with the weight gradients on the second stream: the second reads the
// first's input gradient and both add into one weight gradient, so a weight-gradient GEMM that started before
// its dout was written, or two that overlapped on the same output, would show against the CPU.
TEST_P(CudaMatmul, ChainedBackwardsOnTwoStreams) {
  const int64_t n = 4096, d = 512;
  use(&BackendOptions::gemm_algorithms, GemmAlgorithms::heuristic);  // chosen at once: the first call already overlaps
  auto x = normal(n * d), w = normal(d * d, 0.05), dout = normal(n * d), dw = normal(d * d);
  std::vector<float> dmid(n * d), dx(n * d), rdw = dw;
  cpu.matmul_backward(view(dout, {n, d}), view(x, {n, d}), view(w, {d, d}), out(view(dmid, {n, d})),
                      out(view(rdw, {d, d})), out(Tensor{}));
  cpu.matmul_backward(view(dmid, {n, d}), view(x, {n, d}), view(w, {d, d}), out(view(dx, {n, d})),
                      out(view(rdw, {d, d})), out(Tensor{}));
  const Tensor gx = up(x, {n, d}), gw = up(w, {d, d});
  Tensor gmid = poisoned({n, d}, dt()), gdx = poisoned({n, d}, dt()), gdw = up(dw, {d, d}), no_bias;
  gpu->matmul_backward(up(dout, {n, d}), gx, gw, gmid, gdw, no_bias);
  gpu->matmul_backward(gmid, gx, gw, gdx, gdw, no_bias);
  expect_close(gdx, dx, "second layer's dinp");
  expect_close(gdw, rdw, "weight gradient of both layers");
}

// A timed choice holds for the process: fresh plans (as a second backend or a second run in one process has)
// take the algorithm timed first without timing again, so their products are the same bits.
TEST_P(CudaMatmul, TimedChoicesHoldForTheProcess) {
  const int64_t n = 2048, k = 768, m = 2304;  // gpt2's qkv projection at two sequences
  const auto x = normal(n * k), w = normal(m * k, 0.2);
  const Tensor gx = up(x, {n, k}), gw = up(w, {m, k});
  std::vector<float> products[2];
  use(&BackendOptions::gemm_algorithms, GemmAlgorithms::timed);
  for (int run = 0; run < 2; ++run) {
    // The second run on a second backend of the process: its plans are fresh.
    if (run == 1) gpu = std::make_unique<CudaBackend>(0, *allocator, gpu->options());
    Tensor y = poisoned({n, m}, dt());
    gpu->matmul_forward(gx, gw, Tensor{}, y);
    products[run] = download(y);
    EXPECT_EQ(gpu->gemm_timing().shapes_timed, run == 0 ? 1 : 0)
        << (run == 0 ? "cuBLASLt offers several algorithms here" : "the first run's choice is kept");
  }
  EXPECT_EQ(products[0], products[1]);
}

TEST(GemmAlgorithmTiming, KeepsTheHeuristicsPickWithinTheMargin) {
  EXPECT_EQ(cuda::fastest_candidate({1.00f, 0.99f, 1.2f}), 0u) << "1% faster is noise";
  EXPECT_EQ(cuda::fastest_candidate({1.00f, 1.1f, 0.90f}), 2u);
  EXPECT_EQ(cuda::fastest_candidate({INFINITY, 2.0f}), 1u) << "a first candidate that cannot run";
  EXPECT_EQ(cuda::fastest_candidate({}), 0u);
}

struct AttentionCase {
  int64_t batch, seq, heads, kv_heads, head_dim;
  int64_t window = 0;  // AttentionShape::window: 0, causal over the whole sequence
  double scale = 0;    // AttentionShape::softmax_scale: 0, 1/sqrt(head_dim)
};

class CudaAttention : public CudaOps {
 protected:
  // Forward and backward of one shape on both backends, the GPU's forward and backward by the given kernels;
  // returns the GPU's dqkv for determinism checks.
  std::vector<float> check(const AttentionCase& c, AttentionKernels forward = AttentionKernels::own,
                           AttentionKernels backward = AttentionKernels::own) {
    SCOPED_TRACE(testing::Message() << "B" << c.batch << " T" << c.seq << " H" << c.heads << " KV" << c.kv_heads << " D"
                                    << c.head_dim << " W" << c.window << " scale " << c.scale);
    const AttentionShape s{c.batch, c.seq, c.heads, c.kv_heads, c.head_dim, c.window, c.scale};
    const Shape qkv_shape{s.tokens(), s.qkv_width()}, o_shape{s.tokens(), s.q_width()},
        lse_shape{s.batch, s.heads, s.seq};
    auto qkv = normal(qkv_shape.numel()), dout = normal(o_shape.numel());
    std::vector<float> o(o_shape.numel()), lse(lse_shape.numel()), dqkv(qkv.size());
    cpu.attention_forward(view(qkv, qkv_shape), s, out(view(o, o_shape)), out(view(lse, lse_shape)));
    cpu.attention_backward(view(dout, o_shape), view(qkv, qkv_shape), view(o, o_shape), view(lse, lse_shape), s,
                           out(view(dqkv, qkv_shape)));

    const Tensor g_qkv = up(qkv, qkv_shape);
    Tensor g_o = poisoned(o_shape, dt()), g_lse = poisoned(lse_shape, DType::f32), g_dqkv = poisoned(qkv_shape, dt());
    use(&BackendOptions::attention, forward);
    gpu->attention_forward(g_qkv, s, g_o, g_lse);
    use(&BackendOptions::attention, backward);
    gpu->attention_backward(up(dout, o_shape), g_qkv, g_o, g_lse, s, g_dqkv);
    expect_close(g_o, o, "attention output");
    // lse is fp32 on both sides; in bf16 runs the GPU's scores come from bf16 products.
    EXPECT_LE(relative_error(download(g_lse), lse), dt() == DType::f32 ? 1e-5 : 1e-3) << "attention lse";
    expect_close(g_dqkv, dqkv, "attention dqkv");
    if (s.banded()) {
      // The comparisons above test the band only if it matters: plain causal attention over the same inputs
      // gives outputs and gradients far from the GPU's.
      AttentionShape causal = s;
      causal.window = 0;
      std::vector<float> causal_o(o.size()), causal_lse(lse.size()), causal_dqkv(qkv.size());
      cpu.attention_forward(view(qkv, qkv_shape), causal, out(view(causal_o, o_shape)),
                            out(view(causal_lse, lse_shape)));
      cpu.attention_backward(view(dout, o_shape), view(qkv, qkv_shape), view(causal_o, o_shape),
                             view(causal_lse, lse_shape), causal, out(view(causal_dqkv, qkv_shape)));
      EXPECT_GT(relative_error(download(g_o), causal_o), kBandGap) << "the window left out of the output";
      EXPECT_GT(relative_error(download(g_dqkv), causal_dqkv), kBandGap) << "the window left out of dqkv";
    }
    return download(g_dqkv);
  }

  // Well above every dtype's tolerance, well below what the windows of the tests below change.
  static constexpr double kBandGap = 0.1;
};

TEST_P(CudaAttention, FlashShapes) {
  // In bf16, head sizes 64 and 128 take the tensor-core kernels; 70 and 130 tokens leave partial tiles.
  check({2, 70, 4, 2, 64});
  check({1, 130, 2, 2, 128});
  check({1, 64, 3, 1, 64});
}

TEST_P(CudaAttention, OtherHeadSizes) {
  check({2, 33, 4, 4, 16});
  check({1, 20, 2, 1, 40});
}

// A sliding window narrower than the sequence (query t attends to keys t - window < u <= t), narrower and wider
// than the flash kernels' blocks of 64 positions, over sequences that end inside a block. In bf16, head sizes 64
// and 128 run the flash kernels, which walk only the blocks the band reaches and mask its edges (head size 128
// takes the dK/dV kernel's 32-query steps); fp32, fp16 and head size 32 run the simple kernels.
TEST_P(CudaAttention, SlidingWindow) {
  check({2, 200, 4, 2, 64, 40});  // rows whose window starts past their walk's first block (no key there)
  check({2, 200, 4, 2, 64, 100});
  check({1, 130, 4, 2, 128, 17});  // warps that skip their walk's first block
  check({1, 190, 4, 2, 128, 70});
  check({2, 90, 4, 2, 32, 24});
  check({1, 80, 4, 2, 64, 1});  // each query its own key alone: the walks hold the diagonal block only
  check({1, 256, 4, 2, 128, 100});  // head size 128 with blocks inside the band, unmasked
  check({1, 1024, 2, 1, 64, 128});  // long walks; windows of whole blocks
  check({1, 1000, 2, 2, 128, 64});
  check({1, 513, 2, 1, 64, 256});  // a partial last block
}

// A scale of the scores other than 1/sqrt(head_dim) (Gemma 3's query_pre_attn_scalar^-0.5), with and without a
// window; the CPU's comparison fails if the GPU kept 1/sqrt(head_dim) (the outputs differ by far more).
TEST_P(CudaAttention, ScalesTheScoresAsTheShapeSays) {
  check({1, 130, 4, 2, 128, 0, 1 / std::sqrt(168.0)});
  check({2, 90, 4, 2, 64, 40, 1 / std::sqrt(24.0)});
  check({2, 33, 4, 4, 16, 0, 0.5});
}

// A window as wide as the sequence, or wider, is plain causal attention: the same bits as without a window.
TEST_P(CudaAttention, WindowAsWideAsTheSequenceIsCausal) {
  const test::RandomInputs fixed = rnd;  // the same inputs for every run
  const auto causal = check({1, 70, 4, 2, 64});
  for (int64_t window : {70, 500}) {
    rnd = fixed;
    EXPECT_EQ(check({1, 70, 4, 2, 64, window}), causal) << "window " << window;
  }
}

TEST_P(CudaAttention, BackwardIsDeterministic) {
  for (const AttentionCase& c : {AttentionCase{2, 200, 4, 2, 64}, AttentionCase{2, 200, 4, 2, 64, 40}}) {
    const test::RandomInputs fixed = rnd;  // the same inputs for both runs
    const auto first = check(c);
    rnd = fixed;
    EXPECT_EQ(check(c), first) << "the same bits on every run";
  }
}

// cuDNN's fused attention graphs (bf16 and fp16): against the CPU alone and mixed with our kernels in either direction,
// which holds only if both write the same log-sum-exp. A shape cuDNN builds no plan for fails with its reason.
class CudnnAttention : public CudaAttention {
 protected:
  void SetUp() override {
    CudaAttention::SetUp();
    if (IsSkipped()) return;
#ifndef ZB_HAVE_CUDNN
    GTEST_SKIP() << "built without cuDNN";
#endif
  }
  void expect_cudnn_ran(int64_t forwards, int64_t backwards) {
    const AttentionUse& use = gpu->attention_use();
    EXPECT_EQ(use.cudnn_forward, forwards) << use.why_not_cudnn;
    EXPECT_EQ(use.cudnn_backward, backwards) << use.why_not_cudnn;
  }
};

TEST_P(CudnnAttention, MatchesTheCpu) {
  const auto cudnn = AttentionKernels::cudnn;
  check({2, 70, 4, 4, 64}, cudnn, cudnn);   // 70 tokens: a partial tile
  check({2, 200, 4, 2, 64}, cudnn, cudnn);  // grouped-query heads: dK, dV summed over each group
  check({1, 130, 2, 2, 128}, cudnn, cudnn);
  // Again, with the workspace as the first runs left it (the fp32 query-gradient accumulator lives there).
  check({2, 70, 4, 4, 64}, cudnn, cudnn);
  expect_cudnn_ran(4, 4);
}

TEST_P(CudnnAttention, ScalesTheScoresAsTheShapeSays) {
  const auto cudnn = AttentionKernels::cudnn;
  check({1, 130, 4, 2, 128, 0, 1 / std::sqrt(168.0)}, cudnn, cudnn);
  check({2, 96, 4, 4, 64, 0, 1 / std::sqrt(24.0)}, cudnn, AttentionKernels::own);  // one log-sum-exp for both
  check({2, 96, 4, 4, 64, 0}, cudnn, cudnn);  // the default again from the same plans
  expect_cudnn_ran(3, 2);
}

TEST_P(CudnnAttention, MixesWithOurKernels) {
  check({2, 96, 4, 4, 64}, AttentionKernels::cudnn, AttentionKernels::own);
  check({2, 96, 4, 4, 64}, AttentionKernels::own, AttentionKernels::cudnn);
  expect_cudnn_ran(1, 1);
  EXPECT_EQ(gpu->attention_use().own_forward, 1);
  EXPECT_EQ(gpu->attention_use().own_backward, 1);
}

// The sliding window's band mask in cuDNN's graphs (cuDNN 9.2 on), alone and mixed with our kernels in either
// direction (the same log-sum-exp within the band). An older cuDNN leaves banded shapes to our kernels, saying why.
TEST_P(CudnnAttention, SlidingWindow) {
  const auto cudnn = AttentionKernels::cudnn, own = AttentionKernels::own;
  check({2, 200, 4, 2, 64, 40}, cudnn, cudnn);
  check({1, 130, 4, 2, 128, 70}, cudnn, cudnn);
  check({2, 150, 4, 4, 64, 70}, cudnn, own);
  check({2, 150, 4, 4, 64, 70}, own, cudnn);
#ifdef ZB_HAVE_CUDNN
  if (cudnnGetVersion() < 90200) {
    expect_cudnn_ran(0, 0);
    EXPECT_NE(gpu->attention_use().why_not_cudnn.find("sliding window"), std::string::npos)
        << gpu->attention_use().why_not_cudnn;
    return;
  }
#endif
  expect_cudnn_ran(3, 3);
}

// Head size 256 (Gemma 3: four query heads over one key/value head, its own scale, local layers' window): cuDNN's
// graphs on Hopper and later, where its backward takes head sizes up to 256 (our flash kernels stop at 128).
TEST_P(CudnnAttention, HeadSize256) {
  const auto cudnn = AttentionKernels::cudnn;
  check({1, 130, 4, 1, 256, 0, 1 / std::sqrt(256.0)}, cudnn, cudnn);
  check({2, 200, 4, 1, 256, 64, 1 / std::sqrt(256.0)}, cudnn, cudnn);
  int major = 0;
  ZB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major < 9) GTEST_SKIP() << "cuDNN's backward takes head size 256 from Hopper on";
#ifdef ZB_HAVE_CUDNN
  if (cudnnGetVersion() < 90200) {  // (the windowed shape runs our kernels there: SlidingWindow)
    expect_cudnn_ran(1, 1);
    return;
  }
#endif
  expect_cudnn_ran(2, 2);
}

class CudaRope : public CudaOps {
 protected:
  void check(const AttentionShape& s) {
    SCOPED_TRACE(testing::Message() << "T" << s.seq << " H" << s.heads << " KV" << s.kv_heads << " D" << s.head_dim);
    const Shape shape{s.tokens(), s.qkv_width()};
    auto qkv = normal(shape.numel()), d = normal(shape.numel());
    auto inv_freq = rnd.uniform<float>(s.head_dim / 2, 0.01, 1.0);
    std::vector<float> rq = qkv, rd = d;
    cpu.rope_forward(out(view(rq, shape)), view(inv_freq, {s.head_dim / 2}), s);
    cpu.rope_backward(out(view(rd, shape)), view(inv_freq, {s.head_dim / 2}), s);
    Tensor gq = up(qkv, shape), gd = up(d, shape);
    const Tensor g_freq = upload(inv_freq, {s.head_dim / 2}, DType::f32);
    gpu->rope_forward(gq, g_freq, s);
    gpu->rope_backward(gd, g_freq, s);
    expect_close(gq, rq, "rope forward");
    expect_close(gd, rd, "rope backward");
  }
};

// Head size 32 takes 16-byte vectors (in both dtypes); 12 (a half of 6) and the odd row width (3 + 3 heads of
// 10) take one pair a thread.
TEST_P(CudaRope, ForwardAndBackward) {
  check({2, 19, 4, 2, 32});
  check({1, 7, 3, 1, 12});
  check({1, 5, 3, 3, 10});
}

// Initial values drawn on the GPU: the CPU's values for the same (seed, stream, first index), at a 64-bit first
// index and a random offset into the stream, and a constant fill.
TEST_P(CudaOps, InitialValuesAreTheCpusDraws) {
  const int64_t n = 10'001;
  const uint64_t seed = rnd.seed(), stream = (uint64_t(rnd.ids(1, 1 << 20)[0]) << 16) | 3;
  for (const int64_t first : {int64_t(rnd.ids(1, 1 << 30)[0]), int64_t(5) << 33}) {
    SCOPED_TRACE(cat("first index ", first));
    std::vector<float> ref(n);
    cpu.fill_normal(out(view(ref, {n})), seed, stream, first, 0.02);
    Tensor g = poisoned({n}, dt());
    gpu->fill_normal(g, seed, stream, first, 0.02);
    expect_close(g, ref, "fill_normal");
  }
  std::vector<float> ones(n, 1.0f);
  Tensor g = poisoned({n}, dt());
  gpu->fill_value(g, 1.0);
  expect_close(g, ones, "fill_value");
}

// f = 72 takes 16-byte vectors in SwiGLU; f = 20 takes them in fp32 only (5 vectors of 4), not in bf16.
TEST_P(CudaOps, Activations) {
  for (const int64_t f : {72, 20}) {
    SCOPED_TRACE(testing::Message() << "f = " << f);
    const int64_t n = 50;
    auto x = normal(n * f, 2.0), d = normal(n * f), x2 = normal(n * 2 * f, 2.0), y = normal(n * f);
    std::vector<float> gelu(n * f), dgelu(n * f), relu(n * f), drelu(n * f), swi(n * f), dswi(n * 2 * f), sum(n * f);
    const Shape sh{n, f}, sh2{n, 2 * f};
    cpu.gelu_forward(view(x, sh), out(view(gelu, sh)));
    cpu.gelu_backward(view(d, sh), view(x, sh), out(view(dgelu, sh)));
    cpu.relu_forward(view(x, sh), out(view(relu, sh)));
    cpu.relu_backward(view(d, sh), view(x, sh), out(view(drelu, sh)));
    cpu.swiglu_forward(view(x2, sh2), out(view(swi, sh)));
    cpu.swiglu_backward(view(d, sh), view(x2, sh2), out(view(dswi, sh2)));
    cpu.residual_forward(view(x, sh), view(y, sh), out(view(sum, sh)));

    const Tensor gx = up(x, sh), gd = up(d, sh), gx2 = up(x2, sh2);
    Tensor o1 = poisoned(sh, dt()), o2 = poisoned(sh, dt()), o3 = poisoned(sh, dt()), o4 = poisoned(sh, dt());
    Tensor o5 = poisoned(sh, dt()), o6 = poisoned(sh2, dt()), o7 = poisoned(sh, dt());
    gpu->gelu_forward(gx, o1);
    gpu->gelu_backward(gd, gx, o2);
    gpu->relu_forward(gx, o3);
    gpu->relu_backward(gd, gx, o4);
    gpu->swiglu_forward(gx2, o5);
    gpu->swiglu_backward(gd, gx2, o6);
    gpu->residual_forward(gx, up(y, sh), o7);
    expect_close(o1, gelu, "gelu");
    expect_close(o2, dgelu, "gelu backward");
    expect_close(o3, relu, "relu");
    expect_close(o4, drelu, "relu backward");
    expect_close(o5, swi, "swiglu");
    expect_close(o6, dswi, "swiglu backward");
    expect_close(o7, sum, "residual");
  }
}

// Rows staged in shared memory (384, 24 logits), rows too wide for it (70,016 and 200,000 bf16 or fp32 logits,
// with wide exponent ranges) and rows that are not whole 16-byte vectors (301).
TEST_P(CudaOps, CrossEntropyWithVocabularyPadding) {
  // Staged two rows a block (384; GPT-2's 50,304 with more rows than an H200 has multiprocessors, so blocks
  // go round their buffers), one row a block (70,016 bf16 is too wide for two; 200,000), the scalar kernel.
  for (const auto& [n, padded, vocab] : {std::tuple<int64_t, int64_t, int64_t>{45, 384, 300},
                                         {300, 50304, 50257},
                                         {6, 70016, 70000},
                                         {5, 24, 20},
                                         {2, 200000, 199999},
                                         {7, 301, 297}}) {
    SCOPED_TRACE(cat(n, " rows of ", vocab, " in ", padded));
    cross_entropy_case(n, padded, vocab);
  }
}

void CudaOps::cross_entropy_case(int64_t n, int64_t padded, int64_t vocab) {
  auto logits = normal(n * padded, 3.0);
  auto targets = rnd.ids(n, int32_t(vocab));
  std::vector<float> losses(n), grad = logits, grad_losses(n);
  cpu.cross_entropy_forward(view(logits, {n, padded}), view(targets), vocab, out(view(losses, {n})));
  cpu.cross_entropy_forward_backward(out(view(grad, {n, padded})), view(targets), vocab, 1.0f / n,
                                     out(view(grad_losses, {n})));
  const Tensor g_targets = upload_ids(targets);
  Tensor g_logits = up(logits, {n, padded}), g_losses = poisoned({n}, DType::f32),
         g_losses2 = poisoned({n}, DType::f32);
  gpu->cross_entropy_forward(g_logits, g_targets, vocab, g_losses);
  gpu->cross_entropy_forward_backward(g_logits, g_targets, vocab, 1.0f / n, g_losses2);
  EXPECT_LE(relative_error(download(g_losses), losses), 1e-5);
  EXPECT_LE(relative_error(download(g_losses2), losses), 1e-5);
  expect_close(g_logits, grad, "logit gradient");
}

// 5000 elements go four at a time; 5003 leaves three for the one-at-a-time kernel.
TEST_P(CudaOps, OptimizersAndGradientScale) {
  for (const auto& [n, kind] : {std::pair<int64_t, OptimizerKind>{5000, OptimizerKind::adamw},
                                {5003, OptimizerKind::adamw},
                                {5003, OptimizerKind::adam},
                                {5003, OptimizerKind::sgd}}) {
    SCOPED_TRACE(cat(optimizer_kind_name(kind), ", ", n, " elements"));
    const OptimizerParams p{kind, 1e-2f, 0.9f, 0.95f, 1e-6f, 0.1f, 0.8f, 3, 0.5f};
    auto master = rnd.normal<float>(n), m = rnd.normal<float>(n, 0.01), v = rnd.uniform<float>(n, 0.0, 1e-3);
    auto grad = normal(n);
    std::vector<float> rm = master, rmm = m, rv = v;
    cpu.optimizer_step(out(view(rm, {n})), view(grad, {n}), out(view(rmm, {n})), out(view(rv, {n})), out(Tensor{}), p);
    Tensor g_master = upload(master, {n}, DType::f32), g_m = upload(m, {n}, DType::f32),
           g_v = upload(v, {n}, DType::f32);
    Tensor g_params = poisoned({n}, dt());
    gpu->optimizer_step(g_master, up(grad, {n}), g_m, g_v, g_params, p);
    EXPECT_LE(relative_error(download(g_master), rm), 1e-6) << "master weights";
    EXPECT_LE(relative_error(download(g_m), rmm), 1e-6) << "first moment";
    if (kind != OptimizerKind::sgd) {
      EXPECT_LE(relative_error(download(g_v), rv), 1e-6) << "second moment";
    }
    EXPECT_EQ(download(g_params), representable(download(g_master), dt()))
        << "the model copy is the master rounded to its dtype";
  }
}

// Adam with 8-bit moments (kernels/cuda/optimizer_8bit.cu) against the CPU's (kernels/adam_8bit.h) over three
// steps, gradients of the dtype: 5003 elements (two whole blocks and a partial one; the second moment's codes
// start unaligned, so every thread moves its elements one by one) and 6152 (three blocks and eight elements, each
// thread's eight in vector moves but the last block's partial threads'). The master weights to
// 1e-6 (the GPU fuses multiply-adds), the moments' codes the same but where a stochastic rounding decision fell
// the other way on a last-bit difference (at most 0.5% of them), the scales to 1e-6, the model copy the master
// rounded; a non-finite factor on the device changes nothing.
TEST_P(CudaOps, EightBitAdamMatchesTheCpu) {
  for (const int64_t n : {int64_t(5003), int64_t(6152)}) {
    SCOPED_TRACE(cat(n, " elements"));
    const int64_t blocks = quantization_blocks(n);
    OptimizerParams p{OptimizerKind::adamw, 1e-2f, 0.9f, 0.95f, 1e-6f, 0.1f, 0.8f, 1, 0.5f};
    auto master = rnd.normal<float>(n);
    std::vector<uint8_t> codes(2 * n, 0);
    std::vector<float> scales(2 * blocks, 0.0f);
    const QuantizedMoments host{codes.data(), codes.data() + n, scales.data(), scales.data() + blocks, 3, 8192};
    std::vector<float> reference = master;
    Tensor g_master = upload(master, {n}, DType::f32), g_params = poisoned({n}, dt());
    Tensor g_codes = poisoned({(2 * n + 3) / 4}, DType::f32), g_scales = poisoned({2 * blocks}, DType::f32);
    ZB_CUDA_CHECK(cudaMemset(g_codes.data, 0, 2 * n));
    ZB_CUDA_CHECK(cudaMemset(g_scales.data, 0, 2 * blocks * sizeof(float)));
    auto* device_codes = static_cast<uint8_t*>(g_codes.data);
    const QuantizedMoments device{
        device_codes, device_codes + n, g_scales.as<float>(), g_scales.as<float>() + blocks, 3, 8192};
    const auto gpu_step = [&](const Tensor& g_grad, const OptimizerParams& params) {
      gpu->synchronize();
      const auto run = [&]<typename T>() {
        cuda::adam_8bit_step<T>(g_master.as<float>(), g_grad.as<T>(), device, g_params.as<T>(), n, params,
                                gpu->stream());
      };
      if (dt() == DType::f32) run.operator()<float>();
      if (dt() == DType::bf16) run.operator()<__nv_bfloat16>();
      if (dt() == DType::f16) run.operator()<__half>();
      gpu->synchronize();
    };
    for (int64_t step = 1; step <= 3; ++step) {
      p.step = step;
      const auto grad = normal(n);
      cpu::optimizer_step_8bit(reference.data(), grad.data(), host, n, p);
      gpu_step(up(grad, {n}), p);
    }
    EXPECT_LE(relative_error(download(g_master), reference), 1e-6) << "master weights";
    std::vector<uint8_t> gpu_codes(2 * n);
    ZB_CUDA_CHECK(cudaMemcpy(gpu_codes.data(), device_codes, 2 * n, cudaMemcpyDeviceToHost));
    int64_t different = 0;
    for (int64_t i = 0; i < 2 * n; ++i) different += gpu_codes[i] != codes[i];
    EXPECT_LE(different, 2 * n / 200) << "codes that differ";
    EXPECT_LE(relative_error(download(g_scales), scales), 1e-6) << "block scales";
    EXPECT_EQ(download(g_params), representable(download(g_master), dt())) << "the model copy is the master rounded";

    // A NaN factor read on the device: the step is skipped, nothing written.
    const std::vector<float> master_before = download(g_master), scales_before = download(g_scales);
    Tensor factor = upload({std::numeric_limits<float>::quiet_NaN()}, {1}, DType::f32);
    OptimizerParams skipped = p;
    skipped.step = 4;
    skipped.grad_factor = factor.as<float>();
    gpu_step(up(normal(n), {n}), skipped);
    EXPECT_EQ(download(g_master), master_before);
    EXPECT_EQ(download(g_scales), scales_before);
    std::vector<uint8_t> after(2 * n);
    ZB_CUDA_CHECK(cudaMemcpy(after.data(), device_codes, 2 * n, cudaMemcpyDeviceToHost));
    EXPECT_EQ(after, gpu_codes);
  }
}

// The update reading its factor on the device: as grad_scale with that value, bit for bit; a NaN factor (a
// step whose loss or norm was not finite) leaves the weights, moments and model copy as they were.
TEST_P(CudaOps, OptimizerReadsItsFactorOnTheDevice) {
  for (const auto& [n, kind] : {std::pair<int64_t, OptimizerKind>{5000, OptimizerKind::adamw},
                                {5003, OptimizerKind::adamw},
                                {5003, OptimizerKind::sgd}}) {
    SCOPED_TRACE(cat(optimizer_kind_name(kind), ", ", n, " elements"));
    const OptimizerParams by_value{kind, 1e-2f, 0.9f, 0.95f, 1e-6f, 0.1f, 0.8f, 3, 0.375f};
    auto master = rnd.normal<float>(n), m = rnd.normal<float>(n, 0.01), v = rnd.uniform<float>(n, 0.0, 1e-3);
    auto grad = normal(n);
    auto run = [&](const OptimizerParams& p) {
      Tensor g_master = upload(master, {n}, DType::f32), g_m = upload(m, {n}, DType::f32);
      Tensor g_v = upload(v, {n}, DType::f32), g_params = up(master, {n});
      gpu->optimizer_step(g_master, up(grad, {n}), g_m, g_v, g_params, p);
      return std::vector<std::vector<float>>{download(g_master), download(g_m), download(g_v), download(g_params)};
    };
    Tensor factor = poisoned({1}, DType::f32);
    const double sum_of_squares = std::pow(1.0 / 0.375 - 1e-6, 2);  // a factor of 0.375 for max_norm 1
    gpu->clip_factor(upload_scalar(sum_of_squares), upload_scalar(2.0), 1.0f, 1.0f, factor);
    EXPECT_EQ(download(factor)[0], clip_factor(sum_of_squares, 2.0, 1.0f)) << "the host's formula";
    gpu->clip_factor(upload_scalar(sum_of_squares), upload_scalar(2.0), 1.0f, 1024.0f, factor);
    EXPECT_EQ(download(factor)[0], clip_factor(sum_of_squares, 2.0, 1.0f, 1024.0f)) << "with a loss scale";
    OptimizerParams by_address = by_value;
    by_address.grad_scale = 7.0f;  // not read
    by_address.grad_factor = factor.as<float>();
    OptimizerParams with_that_value = by_value;
    with_that_value.grad_scale = download(factor)[0];
    const auto expected = run(with_that_value);
    EXPECT_EQ(run(by_address), expected);
    gpu->clip_factor(upload_scalar(sum_of_squares), upload_scalar(std::nan("")), 1.0f, 1.0f, factor);
    EXPECT_TRUE(std::isnan(download(factor)[0]));
    const auto skipped = run(by_address);
    EXPECT_EQ(skipped[0], master);
    EXPECT_EQ(skipped[1], m);
    EXPECT_EQ(skipped[2], v);
    EXPECT_EQ(skipped[3], representable(master, dt()));
  }
}

// The step's loss summed on the device against the CPU's sum in order, and the sum of squares into a device
// scalar as the returning form computes it.
TEST_P(CudaOps, StepScalarsOnTheDevice) {
  const int64_t n = 16384 + 37;
  auto losses = rnd.uniform<float>(n, 0.0, 12.0);
  Tensor total = upload_scalar(0.5);
  gpu->accumulate_sum(upload(losses, {n}, DType::f32), 0.25, total);
  gpu->accumulate_sum(upload(losses, {n}, DType::f32), 0.25, total);
  double expected = 0.5;
  std::vector<float> host = losses;
  for (int i = 0; i < 2; ++i) {
    Tensor cpu_total(&expected, Shape{1}, DType::f64, Device::cpu());
    cpu.accumulate_sum(view(host, {n}), 0.25, cpu_total);
  }
  EXPECT_NEAR(download_scalar(total), expected, 1e-13 * expected) << "fp64 sums in another order";

  const std::vector<std::vector<float>> parts = {normal(1000), normal(77777)};
  std::vector<Tensor> gpu_views;
  for (const auto& part : parts) gpu_views.push_back(up(part, {int64_t(part.size())}));
  Tensor sum_of_squares = upload_scalar(std::nan(""));
  gpu->sum_of_squares_into(gpu_views, sum_of_squares);
  EXPECT_EQ(download_scalar(sum_of_squares), gpu->sum_of_squares(gpu_views));
}

TEST_P(CudaOps, SumOfSquaresAndConversion) {
  // Small tensors against a tight bound, and 9e6 elements, enough for the kernel's four-loads-at-a-time loop
  // (a sweep of its grid is 2M bf16 values), against the bound its fp32 sums of one vector's squares allow:
  // 6.5e-9 seen in bf16, where one vector of 8 squares missed or added twice moves the sum by about 9e-7.
  auto check = [&](std::vector<std::vector<float>> tensors, double tolerance) {
    std::vector<Tensor> cpu_views, gpu_views;
    for (auto& part : tensors) {
      cpu_views.push_back(view(part, {int64_t(part.size())}));
      gpu_views.push_back(up(part, {int64_t(part.size())}));
    }
    const double expected = cpu.sum_of_squares(cpu_views);
    EXPECT_NEAR(gpu->sum_of_squares(gpu_views), expected, tolerance * expected) << tensors.size() << " tensors";
    EXPECT_EQ(gpu->sum_of_squares(gpu_views), gpu->sum_of_squares(gpu_views)) << "deterministic";
  };
  const std::vector<std::vector<float>> parts = {normal(1000), normal(77777), normal(5)};
  check(parts, 1e-9);
  check({normal(9000000)}, 5e-8);
  const Tensor first = up(parts[0], {1000});
  Tensor as_f32 = poisoned({1000}, DType::f32), back = poisoned({1000}, dt());
  gpu->convert(first, as_f32);
  gpu->convert(as_f32, back);
  EXPECT_EQ(download(as_f32), parts[0]);
  EXPECT_EQ(download(back), parts[0]);
}

TEST_P(CudaOps, NormAndEmbeddingGradientsAreDeterministic) {
  const int64_t n = 4096, c = 768, v = 500;
  auto ids = rnd.ids(n, int32_t(v));
  auto dout = normal(n * c), x = normal(n * c), w = normal(c, 0.2, 1.0);
  std::vector<float> mean(n), rstd(n);
  const Tensor g_ids = upload_ids(ids), g_dout = up(dout, {n, c}), gx = up(x, {n, c}), gw = up(w, {c});
  Tensor gy = poisoned({n, c}, dt()), gmean = poisoned({n}, DType::f32), grstd = poisoned({n}, DType::f32);
  gpu->layernorm_forward(gx, gw, gw, 1e-5f, gy, gmean, grstd);
  auto run = [&] {
    Tensor table = up(std::vector<float>(v * c, 0.0f), {v, c}), dx = up(std::vector<float>(n * c, 0.0f), {n, c});
    Tensor dw = up(std::vector<float>(c, 0.0f), {c}), db = up(std::vector<float>(c, 0.0f), {c});
    gpu->embedding_backward(g_ids, g_dout, table);
    gpu->layernorm_backward(g_dout, gx, gw, gmean, grstd, dx, dw, db);
    auto result = download(table);
    for (const Tensor* t : {&dx, &dw, &db}) {
      auto part = download(*t);
      result.insert(result.end(), part.begin(), part.end());
    }
    return result;
  };
  EXPECT_EQ(run(), run());
}

TEST(CudaBackend, OutOfMemoryIsAnErrorTheProcessSurvives) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  TrackingAllocator allocator(std::make_unique<DeviceMemory>(0));
  EXPECT_THROW(allocator.allocate(size_t(1) << 50, MemoryPool::activations), OutOfMemory) << "a petabyte";
  Buffer ok = allocator.allocate(size_t(1) << 20, MemoryPool::activations);
  EXPECT_FALSE(ok.empty()) << "and allocation works again afterwards";
  EXPECT_EQ(allocator.total().current, size_t(1) << 20);
}

// The device's record of a traced window (CUPTI, kernels/device_activity.h). Skipped without a GPU, in a build
// without CUPTI, and where CUPTI is not this process's to use (another profiler holds it).
class CudaDeviceActivity : public ::testing::Test, protected test::CudaFixture {
 protected:
  void SetUp() override {
    if (!start()) GTEST_SKIP() << "no CUDA GPU";
    try {
      activity = make_device_activity(Device::cuda(0));
    } catch (const Error& e) {
      GTEST_SKIP() << e.what();
    }
    if (!activity) GTEST_SKIP() << "built without CUPTI";
  }

  static const TraceSlice& named(const std::vector<TraceSlice>& slices, const std::string& name) {
    const auto it = std::find_if(slices.begin(), slices.end(), [&](const TraceSlice& s) { return s.name == name; });
    if (it == slices.end()) throw Error("no slice named " + name);
    return *it;
  }
  static std::vector<TraceSlice> launched_by(const std::vector<TraceSlice>& slices, const TraceSlice& scope) {
    std::vector<TraceSlice> launched;
    std::copy_if(slices.begin(), slices.end(), std::back_inserter(launched),
                 [&](const TraceSlice& s) { return s.launched_by == scope.id; });
    return launched;
  }

  std::unique_ptr<DeviceActivity> activity;
};

// Each op's work carries its scope's id and lies between the scope's start and the synchronisation after it,
// on the lane of the backend's stream: the matmul's kernels, the pinned upload's bytes, the memset's bytes.
TEST_F(CudaDeviceActivity, DeviceWorkCarriesTheScopeThatLaunchedIt) {
  constexpr int64_t n = 64, k = 128, m = 96;
  const Tensor x = upload(std::vector<float>(n * k, 0.5f), {n, k}, DType::f32);
  const Tensor w = upload(std::vector<float>(m * k, 0.25f), {m, k}, DType::f32);
  Tensor y = poisoned({n, m}, DType::f32), uploaded = poisoned({n, k}, DType::f32);
  TrackingAllocator pinned_allocator(std::make_unique<PinnedHostMemory>());
  const Buffer pinned = pinned_allocator.allocate(Shape{n, k}, DType::f32, MemoryPool::workspace);
  const Tensor staged = pinned.view({n, k}, DType::f32);
  activity->name_stream(gpu->native_stream(), "compute");
  gpu->synchronize();  // the uploads above stay out of the window

  Tracer& tracer = Tracer::get();
  tracer.open();
  activity->start();
  {
    TraceScope op(TraceCategory::op, "matmul_forward");
    gpu->matmul_forward(x, w, Tensor{}, y);
  }
  {
    TraceScope op(TraceCategory::op, "copy_queued");
    gpu->copy_queued(staged, uploaded);
  }
  {
    TraceScope op(TraceCategory::op, "fill_zero");
    gpu->fill_zero(y);
  }
  gpu->synchronize();
  const int64_t synchronized = trace_clock_ns();
  std::vector<TraceSlice> device;
  activity->stop(device);
  const std::vector<TraceSlice> host = tracer.close();
  const std::map<uint32_t, std::string> lanes = activity->stream_names();

  const auto within = [&](const TraceSlice& slice, const TraceSlice& scope) {
    EXPECT_TRUE(slice.lane.device) << slice.name;
    EXPECT_LT(slice.start_ns, slice.end_ns) << slice.name;
    EXPECT_GE(slice.start_ns, scope.start_ns) << slice.name << " starts before " << scope.name << " launched it";
    EXPECT_LE(slice.end_ns, synchronized) << slice.name << " ends after the synchronisation";
    EXPECT_EQ(lanes.count(slice.lane.id) ? lanes.at(slice.lane.id) : "", "compute") << slice.name;
  };
  const TraceSlice matmul = named(host, "matmul_forward");  // (copies: g++ 13 warns of a reference)
  const std::vector<TraceSlice> matmul_work = launched_by(device, matmul);
  const auto kernels = std::count_if(matmul_work.begin(), matmul_work.end(), [](const TraceSlice& s) {
    return s.category == TraceCategory::kernel && s.detail.starts_with("grid [");
  });
  EXPECT_GE(kernels, 1) << "the matmul's kernels carry its scope's id";
  for (const TraceSlice& slice : matmul_work) within(slice, matmul);

  const TraceSlice copy = named(host, "copy_queued");
  const std::vector<TraceSlice> copies = launched_by(device, copy);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].category, TraceCategory::copy);
  EXPECT_EQ(copies[0].bytes, double(n * k * sizeof(float)));
  EXPECT_TRUE(copies[0].detail.starts_with("HtoD")) << copies[0].detail;
  within(copies[0], copy);

  const TraceSlice fill = named(host, "fill_zero");
  const std::vector<TraceSlice> memsets = launched_by(device, fill);
  ASSERT_EQ(memsets.size(), 1u);
  EXPECT_EQ(memsets[0].category, TraceCategory::copy);
  EXPECT_EQ(memsets[0].bytes, double(n * m * sizeof(float)));
  EXPECT_EQ(memsets[0].detail, "memset");
  within(memsets[0], fill);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOps, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMatmul, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaRope, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttention, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });
INSTANTIATE_TEST_SUITE_P(SixteenBit, CudnnAttention, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });

}  // namespace
}  // namespace zb
