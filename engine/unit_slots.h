// UnitSlots: transient whole-unit buffers, reused across units of the same size: stage 3's gathered weights
// and stages 2-3's whole gradients during a unit's backward. A slot remembers which unit it last held, so a
// released unit that is needed again soon (the last blocks of forward, first in backward) is found without
// communicating; each slot also remembers the last collective that touched it, which must finish before the
// slot is overwritten. New slots are allocated only when every slot of the size is in use, so the set grows
// to the schedule's working set during the first step and then stays.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/tracking_allocator.h"

namespace zb {

class UnitSlots {
 public:
  struct Slot {
    Buffer buffer;
    int64_t numel = 0;
    int64_t unit = -1;        // the unit whose contents it holds, -1 for none
    bool in_use = false;      // taken and not yet released (a prefetched unit counts as taken)
    CommTicket ticket = 0;    // the last collective that wrote or read it; 0 for none
    uint64_t last_use = 0;
    // Element ranges known to hold zeros (a gradient slot: the gaps its last unit left uncovered, zeroed then
    // and written by nothing since). Kept across units: it describes the memory, not what the memory holds.
    std::vector<std::pair<int64_t, int64_t>> zero_ranges;
  };

  // rotation: how many slots of a size to cycle through before reusing one whose last collective may still
  // run (2 for gradients: unit l's backward then waits for the reduce-scatter of unit l + 2, not l + 1).
  UnitSlots(TrackingAllocator& allocator, DType dtype, MemoryPool pool, int rotation = 1)
      : allocator_(allocator), dtype_(dtype), pool_(pool), rotation_(rotation) {}

  // The slot holding `unit`'s contents, or nullptr.
  Slot* find(int64_t unit);
  // A slot of `numel` elements for `unit`, marked in use; its old contents are forgotten. The caller must
  // make its work wait for slot->ticket before overwriting it.
  Slot* take(int64_t unit, int64_t numel);
  void release(Slot* slot);
  // Forgets every slot's contents (the weights they were gathered from have changed).
  void forget_contents();
  // The caller has waited for every collective so far: no slot has one in flight.
  void settle() {
    for (Slot& s : slots_) s.ticket = 0;
  }
  Tensor view(const Slot& slot) const { return slot.buffer.view(Shape{slot.numel}, dtype_); }

 private:
  TrackingAllocator& allocator_;
  DType dtype_;
  MemoryPool pool_;
  int rotation_;
  std::deque<Slot> slots_;  // a deque: Slot pointers stay valid as slots are added
  uint64_t clock_ = 0;
};

}  // namespace zb
