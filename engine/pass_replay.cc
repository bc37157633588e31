#include "engine/pass_replay.h"

#include <exception>
#include <utility>

#include "core/check.h"
#include "core/strings.h"

namespace zb {

PassReplay::PassReplay(Backend& backend) : backend_(backend) {
  if (!backend.can_record()) why_off_ = "the backend does not record work (the CPU's, or ZB_PASS_RECORDING=eager)";
}

void PassReplay::turn_off(std::string why) {
  ZB_CHECK(!why.empty(), "turn_off needs a reason");
  if (on()) why_off_ = std::move(why);
}

std::string PassReplay::describe() const {
  if (!on()) return cat("off: ", why_off_);
  size_t recorded = 0;
  for (const auto& [key, r] : recordings_) recorded += !r.segments.empty();
  return cat("on (", recorded, recorded == 1 ? " recorded pass)" : " recorded passes)");
}

PassReplay::Marks PassReplay::run(int key, const Segments& segments) {
  Marks marks;
  const auto queue_as_usual = [&] {
    for (const auto& segment : segments) {
      marks.push_back(backend_.record_event());
      segment();
    }
    marks.push_back(backend_.record_event());
    return std::move(marks);
  };
  if (!on()) return queue_as_usual();
  Recording& r = recordings_[key];
  // The first pass of its kind settles what a recording will hold; a stale recording is made again.
  if (++r.passes == 1) return queue_as_usual();
  if (!r.segments.empty() && stale(r)) r.segments.clear();
  if (r.segments.empty()) {
    if (!record(r, segments)) return queue_as_usual();
    if (stale(r)) {
      turn_off("a recording went stale as soon as it was made");
      return queue_as_usual();
    }
  }
  for (const auto& segment : r.segments) {
    marks.push_back(backend_.record_event());
    segment->replay();
  }
  marks.push_back(backend_.record_event());
  return marks;
}

bool PassReplay::record(Recording& r, const Segments& segments) {
  for (const auto& segment : segments) {
    std::string why_not;
    backend_.begin_recording();
    try {
      segment();
    } catch (const std::exception& e) {
      // The segment's work has not run: the pass is queued as usual next, and a real fault shows up there.
      backend_.abandon_recording();
      r.segments.clear();
      turn_off(cat("recording a pass failed: ", e.what()));
      return false;
    }
    std::unique_ptr<RecordedWork> work = backend_.end_recording(why_not);
    if (!work) {
      r.segments.clear();
      turn_off(why_not);
      return false;
    }
    r.segments.push_back(std::move(work));
  }
  return true;
}

bool PassReplay::stale(const Recording& r) const {
  for (const auto& segment : r.segments)
    if (segment->stale()) return true;
  return false;
}

}  // namespace zb
