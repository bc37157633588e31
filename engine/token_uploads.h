// Token batches on their way to the device. Each batch is drawn from the source into one of two page-locked
// slots and copied in the backend's queue, so that the host never waits for the device to take it: the next
// step's first batch is drawn while the device still works on this step (prefetch), and a slot is only
// refilled once the device has read it, two batches later.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "core/tracking_allocator.h"
#include "engine/token_source.h"
#include "kernels/backend.h"

namespace zb {

class TokenUploads {
 public:
  // For batches of `tokens` ids (inputs and targets each) on the backend's device; the slots come from
  // `staging` (page-locked host memory beside a GPU, for the copies to be asynchronous).
  TokenUploads(TokenSource& source, Backend& backend, TrackingAllocator& staging, int64_t tokens);
  TokenUploads(const TokenUploads&) = delete;
  TokenUploads& operator=(const TokenUploads&) = delete;

  // Draws the next batch into a free slot, if none is drawn yet.
  void prefetch();
  // Queues the copy of the next batch (drawn now unless prefetched) into inputs and targets (int32 [tokens]).
  void upload(Tensor& inputs, Tensor& targets);

 private:
  struct Slot {
    Buffer inputs, targets;
    std::unique_ptr<TimingEvent> copied;  // the device has read the slot once it is past this
  };
  TokenSource& source_;
  Backend& backend_;
  int64_t tokens_;
  std::array<Slot, 2> slots_;
  int next_to_fill_ = 0;
  int drawn_ = -1;  // the slot holding a batch not yet uploaded, or -1
};

}  // namespace zb
