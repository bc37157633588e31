#include "engine/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

Trainer::Trainer(const TrainingOptions& options, Backend& backend, TrackingAllocator& allocator, TokenSource& data)
    : options_(options),
      backend_(backend),
      data_(data),
      layout_(options.model),
      store_(layout_, allocator, options.dtype, options.optimizer.kind != OptimizerKind::sgd),
      model_(layout_, backend, allocator, options.dtype, options.batch, options.seq) {
  store_.initialize(backend, options.seed);
  model_.bind_parameters(bind_model_tensors(layout_, store_.all_params()));
  model_.bind_gradients(bind_model_tensors(layout_, store_.all_grads()));
  const Shape ids{options.batch * options.seq};
  inputs_ = allocator.allocate(ids, DType::i32, MemoryPool::workspace);
  targets_ = allocator.allocate(ids, DType::i32, MemoryPool::workspace);
}

StepStats Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  const Shape ids{options_.batch * options_.seq};
  Tensor inputs = inputs_.view(ids, DType::i32), targets = targets_.view(ids, DType::i32);

  store_.zero_gradients(backend_);
  double loss = 0;
  PassTimes pass;
  for (int64_t micro = 0; micro < options_.grad_accum; ++micro) {
    TokenBatch batch = data_.next_batch();
    backend_.copy(Tensor(batch.inputs.data(), ids, DType::i32, Device::cpu()), inputs);
    backend_.copy(Tensor(batch.targets.data(), ids, DType::i32, Device::cpu()), targets);
    loss += model_.forward_backward(inputs, targets, 1.0f / float(options_.grad_accum), &pass) /
            double(options_.grad_accum);
  }
  if (!std::isfinite(loss)) throw Error(cat("the loss is ", loss, " at step ", step_ + 1));

  const double norm = global_gradient_norm();
  if (!std::isfinite(norm)) throw Error(cat("the gradient norm is ", norm, " at step ", step_ + 1));
  OptimizerParams params = options_.optimizer;
  params.step = ++step_;
  // As torch.nn.utils.clip_grad_norm_: scale by min(1, max_norm / (norm + 1e-6)).
  if (options_.grad_clip > 0) params.grad_scale = float(std::min(1.0, options_.grad_clip / (norm + 1e-6)));
  const auto optimizer_start = backend_.record_event();
  for (size_t u = 0; u < store_.unit_count(); ++u) {
    Tensor master = store_.master(u), m = store_.first_moment(u), v = store_.second_moment(u);
    Tensor model_copy = store_.model_copy(u);
    backend_.optimizer_step(master, store_.grads(u), m, v, model_copy, params);
  }
  const auto optimizer_end = backend_.record_event();
  backend_.synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  StepStats stats{step_, loss, norm, seconds, options_.grad_accum * options_.batch * options_.seq};
  stats.forward_ms = pass.forward_ms;
  stats.backward_ms = pass.backward_ms;
  stats.optimizer_ms = backend_.elapsed_ms(*optimizer_start, *optimizer_end);
  return stats;
}

double Trainer::global_gradient_norm() { return std::sqrt(backend_.sum_of_squares(store_.all_grads())); }

}  // namespace zb
