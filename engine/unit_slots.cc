#include "engine/unit_slots.h"

namespace zb {

UnitSlots::Slot* UnitSlots::find(int64_t unit) {
  for (Slot& s : slots_)
    if (s.unit == unit) return &s;
  return nullptr;
}

UnitSlots::Slot* UnitSlots::take(int64_t unit, int64_t numel) {
  // Least recently used among the free slots of this size: what it held is the least likely to be wanted.
  Slot* best = nullptr;
  for (Slot& s : slots_) {
    if (s.in_use || s.numel != numel) continue;
    if (!best || s.last_use < best->last_use) best = &s;
  }
  if (!best) {
    slots_.push_back(Slot{allocator_.allocate(Shape{numel}, dtype_, pool_), numel});
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
