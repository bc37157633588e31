// UnitAccess: how the Transformer tells its owner which parameter units it is about to use and when it is
// done with them, so that ZeRO stage 3 can gather a unit just in time (and prefetch the next), and stages 2
// and 3 can reduce a unit's gradient as soon as its backward ends. The owner rebinds the unit's views
// (Transformer::bind_unit_parameters / bind_unit_gradients) inside the *_needs calls when their memory moves.
//
// Order per micro-batch: forward_needs(embeddings), forward_needs(block 0), then for each block l
// forward_needs(block l + 1 or final) before block l's last op (the residual add fused into the next norm),
// forward_done(block l); forward_done(embeddings) after the embedding lookup (tied: after the lm head),
// forward_done(final). Backward: backward_needs(final) (and embeddings when tied), backward_done(final),
// then blocks last to first (needs, done), and the embeddings (needs, done) last, without their weights
// when untied.
#pragma once

#include <cstddef>

#include "kernels/backend.h"

namespace zb {

class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  virtual void forward_needs(size_t unit) = 0;
  virtual void forward_done(size_t unit) = 0;
  // The unit's gradient views must be writable until backward_done, and its weights readable unless
  // reads_weights is false (the untied embedding's backward reads only gradients). Returns how the backward
  // stores the unit's gradients: added to what the views hold (earlier micro-batches' sums, or zeros), or
  // written over it (the owner then needs no zeroing beforehand; what lies outside the model's tensors, the
  // alignment gaps and the padding, it must keep at zero itself).
  virtual GradWrite backward_needs(size_t unit, bool reads_weights) = 0;
  // The unit's gradient for this micro-batch is complete.
  virtual void backward_done(size_t unit) = 0;
};

}  // namespace zb
