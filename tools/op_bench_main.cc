// op_bench: times each op of a training step at a model's shapes on one GPU (median of device-timed repeats,
// on random data), with its count per step, so that the step time can be explained op by op: achieved
// TFLOP/s for the matrix work, GB/s for the memory-bound kernels.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>

#include "bench/cli.h"
#include "core/bf16.h"
#include "core/cuda_devices.h"
#include "core/cuda_memory.h"
#include "kernels/cuda/cublaslt_gemm.h"
#include "kernels/cuda/cuda_backend.h"
#include "models/model_registry.h"
#include "models/rope_frequencies.h"

namespace {

using namespace zb;

struct Flags {
  std::string model = "gpt2";
  int64_t batch = 16, seq = 1024, repeats = 20;
};

class OpBench {
 public:
  OpBench(const Flags& f, TrackingAllocator& allocator, CudaBackend& gpu) : f_(f), allocator_(allocator), gpu_(gpu) {}

  // A bf16 tensor of normal(0, std) values.
  Tensor random(Shape shape, float std = 1.0f, DType dtype = DType::bf16) {
    buffers_.push_back(allocator_.allocate(shape, dtype, MemoryPool::workspace));
    Tensor t = buffers_.back().view(shape, dtype);
    std::normal_distribution<float> dist(0.0f, std);
    if (dtype == DType::bf16) {
      std::vector<uint16_t> host(shape.numel());
      for (auto& x : host) x = float_to_bf16_bits(dist(rng_));
      gpu_.copy(Tensor(host.data(), shape, dtype, Device::cpu()), t);
    } else {
      std::vector<float> host(shape.numel());
      for (auto& x : host) x = dtype == DType::f32 ? dist(rng_) : 0.0f;
      gpu_.copy(Tensor(host.data(), shape, dtype, Device::cpu()), t);
    }
    return t;
  }
  // An fp32 tensor's values on the host.
  std::vector<float> host_floats(const Tensor& t) {
    std::vector<float> host(t.numel());
    Tensor h(host.data(), t.shape, DType::f32, Device::cpu());
    gpu_.copy(t, h);
    return host;
  }
  Tensor ids(int64_t n, int64_t bound) {
    std::vector<int32_t> host(n);
    std::uniform_int_distribution<int32_t> dist(0, int32_t(bound - 1));
    for (auto& x : host) x = dist(rng_);
    buffers_.push_back(allocator_.allocate(Shape{n}, DType::i32, MemoryPool::workspace));
    Tensor t = buffers_.back().view(Shape{n}, DType::i32);
    gpu_.copy(Tensor(host.data(), Shape{n}, DType::i32, Device::cpu()), t);
    return t;
  }

  // Times fn (median of repeats after two warm-ups); flops and bytes give the achieved rates.
  void time(const std::string& name, double per_step, double flops, double bytes, const std::function<void()>& fn) {
    for (int i = 0; i < 2; ++i) fn();
    std::vector<double> ms;
    for (int64_t i = 0; i < f_.repeats; ++i) {
      auto start = gpu_.record_event();
      fn();
      auto end = gpu_.record_event();
      ms.push_back(gpu_.elapsed_ms(*start, *end));
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    total_ += median * per_step;
    std::printf("%-28s %9.3f ms x %5.0f = %8.2f ms/step | %7.1f TFLOP/s | %7.0f GB/s\n", name.c_str(), median, per_step,
                median * per_step, flops / median / 1e9, bytes / median / 1e6);
  }
  double total() const { return total_; }

 private:
  const Flags& f_;
  TrackingAllocator& allocator_;
  CudaBackend& gpu_;
  std::vector<Buffer> buffers_;
  std::mt19937 rng_{1234};
  double total_ = 0;
};

int run(const Flags& f) {
  if (f.batch < 1 || f.seq < 1 || f.repeats < 1) {
    throw UsageError("--batch-size, --seq-length and --repeats must be positive integers");
  }
  if (cuda_device_count() == 0) throw UsageError("op_bench needs a CUDA GPU");
  const TransformerConfig c = resolve_model(f.model);
  const int64_t n = f.batch * f.seq, d = c.d_model, L = c.n_layer, vp = c.padded_vocab();
  TrackingAllocator allocator(std::make_unique<DeviceMemory>(0));
  const BackendOptions taken = program_backend_options();
  CudaBackend gpu(0, allocator, taken);
  // Another choice for the ops that follow (each comparison sets the training's choice back).
  auto use = [&](auto member, auto value) {
    BackendOptions other = gpu.options();
    other.*member = value;
    gpu.set_options(other);
  };
  OpBench bench(f, allocator, gpu);
  std::printf("op_bench %s on %s: batch %lld x seq %lld, bf16\n", c.name.c_str(), cuda_device_name(0).c_str(),
              (long long)f.batch, (long long)f.seq);

  const Tensor x = bench.random({n, d}), w_ln = bench.random({d}, 0.1f), b_ln = bench.random({d}, 0.1f);
  Tensor y = bench.random({n, d}), mean = bench.random({n}, 1, DType::f32), rstd = bench.random({n}, 1, DType::f32);
  Tensor dx = bench.random({n, d}), dw = bench.random({d}), db = bench.random({d});
  bench.time("layernorm forward", 1, 0, 4.0 * n * d,
             [&] { gpu.layernorm_forward(x, w_ln, b_ln, 1e-5f, y, mean, rstd); });
  bench.time("layernorm backward", 2.0 * L + 1, 0, 10.0 * n * d,
             [&] { gpu.layernorm_backward(y, x, w_ln, mean, rstd, dx, dw, db); });
  bench.time("residual add", 0, 0, 6.0 * n * d, [&] { gpu.residual_forward(x, y, dx); });
  Tensor z = bench.random({n, d});
  bench.time("residual add + layernorm fused", 2.0 * L, 0, 8.0 * n * d,
             [&] { gpu.residual_layernorm_forward(x, dx, y, w_ln, b_ln, 1e-5f, z, mean, rstd); });

  struct Linear {
    const char* name;
    int64_t in, out;
  };
  const Linear linears[] = {{"qkv", d, c.qkv_width()},
                            {"attn proj", c.attention_width(), d},
                            {"mlp fc", d, c.mlp_in_width()},
                            {"mlp proj", c.d_ff, d}};
  for (const Linear& lin : linears) {
    const Tensor inp = bench.random({n, lin.in}), w = bench.random({lin.out, lin.in}, 0.02f),
                 bias = bench.random({lin.out}, 0.02f);
    Tensor out = bench.random({n, lin.out}), dinp = bench.random({n, lin.in}), dwt = bench.random({lin.out, lin.in});
    Tensor dbias = bench.random({lin.out});
    const double flops = 2.0 * n * lin.in * lin.out;
    // GPT-2's fc forward and proj backward are counted in the GELU epilogues' entries below.
    const bool in_gelu_epilogue = c.mlp == MlpKind::gelu && std::string(lin.name) == "mlp fc";
    const bool in_dgelu_epilogue = c.mlp == MlpKind::gelu && std::string(lin.name) == "mlp proj";
    bench.time(std::string("matmul ") + lin.name + " forward", in_gelu_epilogue ? 0.0 : double(L), flops, 0,
               [&] { gpu.matmul_forward(inp, w, c.bias ? bias : Tensor{}, out); });
    Tensor no_bias;
    bench.time(std::string("matmul ") + lin.name + " backward", in_dgelu_epilogue ? 0.0 : double(L), 2 * flops, 0,
               [&] { gpu.matmul_backward(out, inp, w, dinp, dwt, c.bias ? dbias : no_bias); });
    if (in_dgelu_epilogue) {
      // cuBLASLt's DGELU epilogue on the input gradient against the GEMM followed by our GELU-backward kernel.
      const Tensor pre = bench.random({n, lin.in});
      use(&BackendOptions::gemm_epilogues, GemmEpilogues::kernels);
      bench.time("matmul mlp proj backward + GELU backward kernel", 0, 2 * flops, 0,
                 [&] { gpu.matmul_gelu_backward(out, inp, w, pre, dinp, dwt, c.bias ? dbias : no_bias); });
      gpu.set_options(taken);
      bench.time("matmul mlp proj backward, DGELU epilogue", double(L), 2 * flops, 0,
                 [&] { gpu.matmul_gelu_backward(out, inp, w, pre, dinp, dwt, c.bias ? dbias : no_bias); });
      std::printf("GELU-backward paths taken in bf16: epilogue %lld, GEMM + kernel %lld\n",
                  (long long)gpu.epilogue_use().gelu_backward_epilogue,
                  (long long)gpu.epilogue_use().gelu_backward_kernel);
    }
  }
  if (c.mlp == MlpKind::gelu) {
    // cuBLASLt's GELU epilogue against our bias GEMM + GELU kernel: time, and which GELU the epilogue computes
    // (in fp32, where the tanh form and the erf form differ by far more than rounding).
    const Tensor inp = bench.random({n, d}), w = bench.random({c.d_ff, d}, 0.02f), bias = bench.random({c.d_ff}, 0.02f);
    Tensor pre = bench.random({n, c.d_ff}), act = bench.random({n, c.d_ff});
    const double flops = 2.0 * n * d * c.d_ff;
    use(&BackendOptions::gemm_epilogues, GemmEpilogues::kernels);
    bench.time("mlp fc + GELU kernel", 0, flops, 0, [&] { gpu.matmul_gelu_forward(inp, w, bias, pre, act); });
    gpu.set_options(taken);
    bench.time("mlp fc, GELU epilogue", double(L), flops, 0, [&] { gpu.matmul_gelu_forward(inp, w, bias, pre, act); });
    const int64_t rows = 256;
    const Tensor inp32 = bench.random({rows, d}, 1, DType::f32), w32 = bench.random({c.d_ff, d}, 0.05f, DType::f32);
    const Tensor bias32 = bench.random({c.d_ff}, 0.5f, DType::f32);
    Tensor pre32 = bench.random({rows, c.d_ff}, 1, DType::f32), act32 = bench.random({rows, c.d_ff}, 1, DType::f32);
    std::printf("GELU paths taken in bf16: epilogue %lld, GEMM + kernel %lld\n",
                (long long)gpu.epilogue_use().gelu_epilogue, (long long)gpu.epilogue_use().gelu_kernel);
    const int64_t epilogue_calls = gpu.epilogue_use().gelu_epilogue;
    gpu.matmul_gelu_forward(inp32, w32, bias32, pre32, act32);
    if (gpu.epilogue_use().gelu_epilogue == epilogue_calls) std::printf("(no fp32 GELU epilogue: the kernel ran)\n");
    const std::vector<float> pre_values = bench.host_floats(pre32), act_values = bench.host_floats(act32);
    double tanh_error = 0, erf_error = 0;
    for (size_t i = 0; i < pre_values.size(); ++i) {
      const double v = pre_values[i];
      const double tanh_form = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
      const double erf_form = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      tanh_error = std::max(tanh_error, std::abs(act_values[i] - tanh_form));
      erf_error = std::max(erf_error, std::abs(act_values[i] - erf_form));
    }
    std::printf("GELU epilogue (fp32, %zu values): max |difference| from the tanh form %.2e, from the erf form %.2e\n",
                pre_values.size(), tanh_error, erf_error);
  }
  {
    const Tensor act = bench.random({n, c.mlp_in_width()});
    Tensor outp = bench.random({n, c.d_ff}), dact = bench.random({n, c.mlp_in_width()});
    bench.time("mlp activation forward", c.mlp == MlpKind::gelu ? 0.0 : double(L), 0,
               2.0 * n * (c.mlp_in_width() + c.d_ff), [&] {
                 if (c.mlp == MlpKind::swiglu)
                   gpu.swiglu_forward(act, outp);
                 else if (c.mlp == MlpKind::geglu)
                   gpu.geglu_forward(act, outp);
                 else
                   gpu.gelu_forward(act, outp);
               });
    bench.time("mlp activation backward", c.mlp == MlpKind::gelu ? 0.0 : double(L), 0,
               2.0 * n * (2 * c.mlp_in_width() + c.d_ff), [&] {
                 if (c.mlp == MlpKind::swiglu)
                   gpu.swiglu_backward(outp, act, dact);
                 else if (c.mlp == MlpKind::geglu)
                   gpu.geglu_backward(outp, act, dact);
                 else
                   gpu.gelu_backward(outp, act, dact);
               });
  }
  // Each distinct attention of the model (Gemma 3's local and global layers, Mistral v0.1's band) on its own shape,
  // with the number of layers that take it.
  std::map<int64_t, int64_t> layers_by_window;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t window = c.layer_window(l);
    ++layers_by_window[window > 0 && window < f.seq ? window : 0];  // a window as wide as the sequence: causal
  }
  for (const auto& [window, layers] : layers_by_window) {
    AttentionShape s{f.batch, f.seq, c.n_head, c.n_kv_head, c.head_dim, window};
    s.softmax_scale = c.attention_softmax_scale();
    Tensor qkv = bench.random({n, s.qkv_width()}), o = bench.random({n, s.q_width()});
    Tensor lse = bench.random({f.batch, c.n_head, f.seq}, 1, DType::f32), dqkv = bench.random({n, s.qkv_width()});
    const Tensor dout = bench.random({n, s.q_width()});
    // The products of the keys each query attends (causal, within the window). Forward 2 of them, backward 5 (dV,
    // dP, dK, dQ and P once more).
    double keys = 0;
    for (int64_t t = 0; t < f.seq; ++t) keys += double(t - s.first_key(t) + 1);
    const double product = 2.0 * f.batch * c.n_head * keys * c.head_dim;
    const std::string band = s.banded() ? " (window " + std::to_string(window) + ")" : "";
    // Ours and cuDNN's fused graphs on the same shape; the step counts the ones training would take.
    for (const AttentionKernels kernels : {AttentionKernels::own, AttentionKernels::cudnn}) {
      use(&BackendOptions::attention, kernels);
      const double count = kernels == taken.attention ? double(layers) : 0.0;
      const std::string whose = (kernels == AttentionKernels::own ? "ours" : "cuDNN") + band;
      bench.time("attention forward, " + whose, count, 2 * product, 0, [&] { gpu.attention_forward(qkv, s, o, lse); });
      bench.time("attention backward, " + whose, count, 5 * product, 0,
                 [&] { gpu.attention_backward(dout, qkv, o, lse, s, dqkv); });
    }
  }
  {
    const AttentionShape s{f.batch, f.seq, c.n_head, c.n_kv_head, c.head_dim};
    Tensor qkv = bench.random({n, s.qkv_width()});
    gpu.set_options(taken);
    std::printf("%s\n", gpu.kernel_choices().c_str());
    if (c.position == PositionKind::rotary) {
      std::vector<double> freq = rope_inverse_frequencies(c);
      std::vector<float> freq32(freq.begin(), freq.end());
      Tensor inv = bench.random({c.head_dim / 2}, 1, DType::f32);
      gpu.copy(Tensor(freq32.data(), inv.shape, DType::f32, Device::cpu()), inv);
      bench.time("rope forward", double(L), 0, 4.0 * n * (c.n_head + c.n_kv_head) * c.head_dim,
                 [&] { gpu.rope_forward(qkv, inv, s); });
    }
  }
  {
    const Tensor h = bench.random({n, d}), wte = bench.random({vp, d}, 0.02f);
    Tensor logits = bench.random({n, vp}), losses = bench.random({n}, 1, DType::f32), dh = bench.random({n, d});
    Tensor dwte = bench.random({vp, d});
    const Tensor targets = bench.ids(n, c.vocab_size), tokens = bench.ids(n, c.vocab_size);
    bench.time("lm head forward", 1, 2.0 * n * d * vp, 0, [&] { gpu.matmul_forward(h, wte, Tensor{}, logits); });
    bench.time("cross-entropy fwd+bwd", 1, 0, 4.0 * n * vp,
               [&] { gpu.cross_entropy_forward_backward(logits, targets, c.vocab_size, 1.0f / n, losses); });
    Tensor no_bias;
    bench.time("lm head backward", 1, 4.0 * n * d * vp, 0,
               [&] { gpu.matmul_backward(logits, h, wte, dh, dwte, no_bias); });
    bench.time("embedding forward", 1, 0, 4.0 * n * d, [&] { gpu.embedding_forward(tokens, wte, dh, false); });
    bench.time("embedding backward", 1, 0, 6.0 * n * d, [&] { gpu.embedding_backward(tokens, dh, dwte); });
  }
  {
    const int64_t params = parameter_count(c);
    Tensor master = bench.random({params / L}, 0.02f, DType::f32), m = bench.random({params / L}, 1e-3f, DType::f32);
    Tensor v = bench.random({params / L}, 1e-3f, DType::f32), grad = bench.random({params / L}, 0.01f);
    Tensor model_copy = bench.random({params / L});
    OptimizerParams p;
    bench.time("adamw (per layer's params)", double(L), 0, 30.0 * (params / L),
               [&] { gpu.optimizer_step(master, grad, m, v, model_copy, p); });
    // As the trainer calls it for clipping: every unit's gradient in one call (one wait for the result).
    std::vector<Tensor> unit_grads;
    for (int64_t u = 0; u < L; ++u) unit_grads.push_back(bench.random({params / L}, 0.01f));
    bench.time("sum of squares (all layers, one call)", 1, 0, 2.0 * params, [&] { gpu.sum_of_squares(unit_grads); });
  }
  std::printf("sum of the ops per step: %.1f ms (the trainer's step adds launch gaps and host work)\n", bench.total());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  namespace po = boost::program_options;
  po::options_description options("op_bench options");
  options.add_options()("model", po::value(&f.model)->default_value(f.model), "model name or config.json")(
      "batch-size", po::value(&f.batch)->default_value(f.batch), "samples")(
      "seq-length", po::value(&f.seq)->default_value(f.seq), "tokens per sample")(
      "repeats", po::value(&f.repeats)->default_value(f.repeats), "timed repeats per op (the median is shown)");
  return zb::run_program(argc, argv, "usage: op_bench [options]\nTimes each op of a training step on one GPU.", options,
                         [&] { return run(f); });
}
