#include "engine/token_uploads.h"

#include <cstring>

#include "core/check.h"

namespace zb {

TokenUploads::TokenUploads(TokenSource& source, Backend& backend, TrackingAllocator& staging, int64_t tokens)
    : source_(source), backend_(backend), tokens_(tokens) {
  for (Slot& slot : slots_) {
    slot.inputs = staging.allocate(Shape{tokens}, DType::i32, MemoryPool::workspace);
    slot.targets = staging.allocate(Shape{tokens}, DType::i32, MemoryPool::workspace);
  }
}

void TokenUploads::prefetch() {
  if (drawn_ >= 0) return;
  Slot& slot = slots_[next_to_fill_];
  if (slot.copied) backend_.wait_for(*slot.copied);
  const TokenBatch batch = source_.next_batch();
  ZB_CHECK(int64_t(batch.inputs.size()) == tokens_ && int64_t(batch.targets.size()) == tokens_,
           "a token batch of ", batch.inputs.size(), " ids where ", tokens_, " were expected");
  std::memcpy(slot.inputs.data(), batch.inputs.data(), batch.inputs.size() * sizeof(int32_t));
  std::memcpy(slot.targets.data(), batch.targets.data(), batch.targets.size() * sizeof(int32_t));
  drawn_ = next_to_fill_;
  next_to_fill_ = 1 - next_to_fill_;
}

void TokenUploads::upload(Tensor& inputs, Tensor& targets) {
  prefetch();
  Slot& slot = slots_[drawn_];
  const Shape ids{tokens_};
  backend_.copy_queued(slot.inputs.view(ids, DType::i32), inputs);
  backend_.copy_queued(slot.targets.view(ids, DType::i32), targets);
  slot.copied = backend_.record_event();
  drawn_ = -1;
}

}  // namespace zb
