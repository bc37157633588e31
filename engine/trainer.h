// Trainer: one process's training loop. Each step zeroes the gradients, runs forward and backward over
// grad_accum micro-batches, clips by the global gradient norm and updates every unit with the optimizer.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tracking_allocator.h"
#include "engine/parameter_store.h"
#include "engine/token_source.h"
#include "kernels/backend.h"
#include "models/transformer.h"

namespace zb {

struct TrainingOptions {
  TransformerConfig model;
  int64_t batch = 4;  // samples per micro-batch
  int64_t seq = 64;
  int64_t grad_accum = 1;
  OptimizerParams optimizer;
  float grad_clip = 1.0f;  // global gradient-norm bound; 0 disables clipping
  uint64_t seed = 42;
  DType dtype = DType::f32;
};

struct StepStats {
  int64_t step = 0;          // 1-based
  double loss = 0;           // mean over the step's tokens
  double grad_norm = 0;      // before clipping
  double seconds = 0;        // wall-clock time of the whole step
  int64_t tokens = 0;
  // Device time of the phases (the rest of `seconds` is host work, copies and waiting).
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
};

class Trainer {
 public:
  Trainer(const TrainingOptions& options, Backend& backend, TrackingAllocator& allocator, TokenSource& data);
  Trainer(const Trainer&) = delete;  // its store and model refer to its layout
  Trainer& operator=(const Trainer&) = delete;

  StepStats step();

  const ParameterLayout& layout() const { return layout_; }
  ParameterStore& store() { return store_; }
  Transformer& model() { return model_; }

 private:
  double global_gradient_norm();

  TrainingOptions options_;
  Backend& backend_;
  TokenSource& data_;
  ParameterLayout layout_;
  ParameterStore store_;
  Transformer model_;
  Buffer inputs_, targets_;
  int64_t step_ = 0;
};

}  // namespace zb
