// PassReplay: a micro-batch's forward and backward queued from recordings (Backend::begin_recording) instead of
// launch by launch, where the backend can record and the pass queues only device work: no collective, no copy
// to or from the host, no wait for the host's optimizer. Passes of one kind (the same key) queue the same work
// on the same buffers every step, so each kind is recorded once and replayed: the first pass of a kind runs
// as usual (it settles the GEMM algorithms, the attention plans and the scratch sizes), the second is
// recorded and replayed, the later ones replayed. A pass the backend could not record runs as usual, and
// replay stays off from then on, with the reason kept for the report. While a trace window is open (core/trace.h)
// passes are queued as usual.
//
// A pass is a list of segments (the forward with the loss, then the backward), each recorded on its own, so
// that the events timing them are recorded between replays, outside the recordings.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace zb {

class PassReplay {
 public:
  using Segments = std::vector<std::function<void()>>;
  using Marks = std::vector<std::unique_ptr<TimingEvent>>;

  explicit PassReplay(Backend& backend);

  // From now on every pass is queued as usual (the recordings are no longer used); `why` is reported.
  void turn_off(std::string why);
  bool on() const { return why_off_.empty(); }
  // "on (N recorded passes)", or "off: why".
  std::string describe() const;

  // Queues the pass's segments in order, from `key`'s recordings where there are some, else as usual. Returns
  // a mark before each segment and one after the last.
  Marks run(int key, const Segments& segments);

 private:
  struct Recording {
    int passes = 0;  // queued so far, either way
    // Empty until recorded.
    std::vector<std::unique_ptr<RecordedWork>> segments;
  };
  // Records every segment into `r`; false (replay turned off, nothing queued) where one could not be.
  bool record(Recording& r, const Segments& segments);
  // A mark, queue(i), for i below count, and a last mark.
  Marks timed(size_t count, const std::function<void(size_t)>& queue);
  bool stale(const Recording& r) const;

  Backend& backend_;
  std::string why_off_;
  std::map<int, Recording> recordings_;
};

}  // namespace zb
