#include "engine/unit_slots.h"

namespace zb {

UnitSlots::Slot* UnitSlots::find(int64_t unit) {
  for (Slot& s : slots_)
    if (s.unit == unit) return &s;
  return nullptr;
}

UnitSlots::Slot* UnitSlots::take(int64_t unit, int64_t numel) {
  // A free slot with nothing in flight first; else, once `rotation` slots of the size exist, the least
  // recently used free one (what it held is the least likely to be wanted; its collective the oldest).
  Slot* best = nullptr;
  int of_size = 0;
  for (Slot& s : slots_) {
    if (s.numel != numel) continue;
    ++of_size;
    if (s.in_use) continue;
    const bool settled = s.ticket == 0, best_settled = best && best->ticket == 0;
    if (!best || (settled && !best_settled) || (settled == best_settled && s.last_use < best->last_use)) best = &s;
  }
  if (best && best->ticket != 0 && of_size < rotation_) best = nullptr;  // grow the rotation instead of waiting
  if (!best) {
    Slot slot;
    slot.buffer = allocator_.allocate(Shape{numel}, dtype_, pool_);
    slot.numel = numel;
    slots_.push_back(std::move(slot));
    best = &slots_.back();
  }
  best->unit = unit;
  best->in_use = true;
  best->last_use = ++clock_;
  return best;
}

void UnitSlots::release(Slot* slot) {
  slot->in_use = false;
  slot->last_use = ++clock_;
}

void UnitSlots::forget_contents() {
  for (Slot& s : slots_) {
    s.unit = -1;
    s.in_use = false;  // also drops prefetch reservations that were never used
  }
}

}  // namespace zb
