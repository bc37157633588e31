#include "models/activations.h"

#include <memory>

#include "kernels/backend.h"

namespace zb {

Activations::Activations(const TransformerConfig& c, TrackingAllocator& allocator, DType dtype, int64_t batch,
                         int64_t seq)
    : allocator_(allocator) {
  const int64_t n = batch * seq;
  const DType stats = stats_dtype(dtype);
  auto norm_outputs = [&] {
    return NormOutputs{make(Shape{n, c.d_model}, dtype), make(Shape{n}, stats), make(Shape{n}, stats)};
  };

  for (int64_t l = 0; l <= c.n_layer; ++l) residual.push_back(make(Shape{n, c.d_model}, dtype));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerActivations a;
    a.ln1 = norm_outputs();
    a.qkv = make(Shape{n, c.qkv_width()}, dtype);
    a.attention = make(Shape{n, c.attention_width()}, dtype);
    a.lse = make(Shape{batch, c.n_head, seq}, stats);
    a.mid = make(Shape{n, c.d_model}, dtype);
    a.ln2 = norm_outputs();
    a.fc = make(Shape{n, c.mlp_in_width()}, dtype);
    a.activated = make(Shape{n, c.d_ff}, dtype);
    layers.push_back(a);
  }
  ln_f = norm_outputs();
  logits = make(Shape{n, c.padded_vocab()}, dtype);
  losses = make(Shape{n}, stats);
  branch = make(Shape{n, c.d_model}, dtype);

  d_residual = make(Shape{n, c.d_model}, dtype);
  d_norm = make(Shape{n, c.d_model}, dtype);
  d_attention = make(Shape{n, c.attention_width()}, dtype);
  d_qkv = make(Shape{n, c.qkv_width()}, dtype);
  d_fc = make(Shape{n, c.mlp_in_width()}, dtype);
  // A GELU MLP's backward goes from d_residual straight to d_fc (Backend::matmul_gelu_backward).
  if (c.mlp != MlpKind::gelu) d_activated = make(Shape{n, c.d_ff}, dtype);
}

size_t Activations::planned_bytes(const TransformerConfig& config, DType dtype, int64_t batch, int64_t seq) {
  TrackingAllocator counting(std::make_unique<CountingMemory>());
  const Activations plan(config, counting, dtype, batch, seq);
  return counting.usage(MemoryPool::activations).current;
}

Tensor Activations::make(Shape shape, DType dtype) {
  buffers_.push_back(allocator_.allocate(shape, dtype, MemoryPool::activations));
  return buffers_.back().view(shape, dtype);
}

}  // namespace zb
