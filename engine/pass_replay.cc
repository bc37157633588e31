#include "engine/pass_replay.h"

#include <exception>
#include <utility>

#include "core/check.h"
#include "core/strings.h"
#include "core/trace.h"

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
  const auto as_usual = [&] { return timed(segments.size(), [&](size_t i) { segments[i](); }); };
  // While a trace window is open every pass is queued launch by launch, so that each kernel carries the
  // operation that launched it (a replay's kernels carry the replay's launch only); nothing is recorded then.
  if (!on() || Tracer::get().is_open()) return as_usual();
  Recording& r = recordings_[key];
  // The first pass of its kind settles what a recording will hold; a stale recording is made again.
  if (++r.passes == 1) return as_usual();
  if (!r.segments.empty() && stale(r)) r.segments.clear();
  if (r.segments.empty()) {
    if (!record(r, segments)) return as_usual();
    if (stale(r)) {
      turn_off("a recording went stale as soon as it was made");
      return as_usual();
    }
  }
  return timed(r.segments.size(), [&](size_t i) { r.segments[i]->replay(); });
}

PassReplay::Marks PassReplay::timed(size_t count, const std::function<void(size_t)>& queue) {
  Marks marks;
  for (size_t i = 0; i < count; ++i) {
    marks.push_back(backend_.record_event());
    queue(i);
  }
  marks.push_back(backend_.record_event());
  return marks;
}

bool PassReplay::record(Recording& r, const Segments& segments) {
  std::string why_not;
  for (const auto& segment : segments) {
    backend_.begin_recording();
    try {
      segment();
    } catch (const std::exception& e) {
      // The segment's work has not run: the pass is queued as usual next, and a real fault shows up there.
      backend_.abandon_recording();
      why_not = cat("recording a pass failed: ", e.what());
      break;
    }
    std::unique_ptr<RecordedWork> work = backend_.end_recording(why_not);
    if (!work) {
      if (why_not.empty()) why_not = "the backend made no recording";
      break;
    }
    r.segments.push_back(std::move(work));
  }
  if (why_not.empty()) return true;
  r.segments.clear();
  turn_off(why_not);
  return false;
}

bool PassReplay::stale(const Recording& r) const {
  for (const auto& segment : r.segments)
    if (segment->stale()) return true;
  return false;
}

}  // namespace zb
