// PassReplay's protocol against a backend that records by name: the first pass of each kind queued as usual,
// the second recorded and replayed, the later ones replayed, each segment timed from outside its recording; a
// recording that fails (none made, or an exception while recording) turns replay off and queues the pass as
// usual; a stale recording is made again.
#include "engine/pass_replay.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/errors.h"
#include "kernels/cpu/cpu_backend.h"

namespace zb {
namespace {

// Records nothing itself: the test's segments log what they queued and whether the backend was recording.
class NamingBackend final : public CpuBackend {
 public:
  struct Work final : RecordedWork {
    NamingBackend& backend;
    std::string name;
    Work(NamingBackend& b, std::string n) : backend(b), name(std::move(n)) {}
    bool stale() const override { return backend.stale; }
    void replay() override { backend.log.push_back("replay " + name); }
  };

  bool can_record() const override { return recordable; }
  void begin_recording() override {
    ASSERT_FALSE(recording);
    recording = true;
  }
  std::unique_ptr<RecordedWork> end_recording(std::string& why_not) override {
    EXPECT_TRUE(recording);
    recording = false;
    if (!recording_works) {
      why_not = "the capture failed";
      return nullptr;
    }
    return std::make_unique<Work>(*this, log.back().substr(std::string("record ").size()));
  }
  void abandon_recording() noexcept override {
    recording = false;
    ++abandoned;
  }
  std::unique_ptr<TimingEvent> record_event() override {
    EXPECT_FALSE(recording) << "a mark inside a recording";
    log.push_back("mark");
    return CpuBackend::record_event();
  }

  bool recordable = true, recording_works = true, recording = false, stale = false;
  int abandoned = 0;
  std::vector<std::string> log;
};

// Pass `key`: a forward and a backward segment that log themselves ("run 0f", "record 0b", ...).
PassReplay::Segments pass(NamingBackend& backend, int key, bool throw_while_recording = false) {
  const auto segment = [&backend, key, throw_while_recording](const char* half) {
    return [&backend, key, throw_while_recording, half] {
      if (backend.recording && throw_while_recording) throw Error("a wait for the device");
      backend.log.push_back((backend.recording ? "record " : "run ") + std::to_string(key) + half);
    };
  };
  return {segment("f"), segment("b")};
}

// The log without the marks.
std::vector<std::string> work_of(const std::vector<std::string>& log) {
  std::vector<std::string> out;
  for (const std::string& entry : log)
    if (entry != "mark") out.push_back(entry);
  return out;
}

TEST(PassReplay, FirstPassRunsSecondIsRecordedAndReplayedLaterOnesReplayed) {
  NamingBackend backend;
  PassReplay replay(backend);
  for (int key : {0, 1, 1, 0, 0}) EXPECT_EQ(replay.run(key, pass(backend, key)).size(), 3u);
  const std::vector<std::string> expected{"run 0f",    "run 0b",    "run 1f",    "run 1b",     // first of each kind
                                          "record 1f", "record 1b", "replay 1f", "replay 1b",  // second: recorded
                                          "record 0f", "record 0b", "replay 0f", "replay 0b",
                                          "replay 0f", "replay 0b"};  // then replayed
  EXPECT_EQ(work_of(backend.log), expected);
  // Marks around each replayed segment, outside the recordings.
  const std::vector<std::string> last_pass(backend.log.end() - 5, backend.log.end());
  EXPECT_EQ(last_pass, (std::vector<std::string>{"mark", "replay 0f", "mark", "replay 0b", "mark"}));
  EXPECT_EQ(replay.describe(), "on (2 recorded passes)");
}

TEST(PassReplay, ABackendThatCannotRecordRunsEveryPass) {
  NamingBackend backend;
  backend.recordable = false;
  PassReplay replay(backend);
  for (int i = 0; i < 2; ++i) replay.run(0, pass(backend, 0));
  EXPECT_EQ(work_of(backend.log), (std::vector<std::string>{"run 0f", "run 0b", "run 0f", "run 0b"}));
  EXPECT_NE(replay.describe().find("off: the backend does not record"), std::string::npos) << replay.describe();
}

TEST(PassReplay, AFailedRecordingRunsThePassAndTurnsReplayOff) {
  NamingBackend backend;
  backend.recording_works = false;
  PassReplay replay(backend);
  for (int i = 0; i < 3; ++i) replay.run(0, pass(backend, 0));
  EXPECT_EQ(work_of(backend.log),
            (std::vector<std::string>{"run 0f", "run 0b", "record 0f", "run 0f", "run 0b", "run 0f", "run 0b"}));
  EXPECT_EQ(replay.describe(), "off: the capture failed");
}

TEST(PassReplay, AnExceptionWhileRecordingAbandonsItAndRunsThePass) {
  NamingBackend backend;
  PassReplay replay(backend);
  for (int i = 0; i < 3; ++i) replay.run(0, pass(backend, 0, /*throw_while_recording=*/true));
  EXPECT_EQ(work_of(backend.log),
            (std::vector<std::string>{"run 0f", "run 0b", "run 0f", "run 0b", "run 0f", "run 0b"}));
  EXPECT_EQ(backend.abandoned, 1);
  EXPECT_FALSE(backend.recording);
  EXPECT_EQ(replay.describe(), "off: recording a pass failed: a wait for the device");
}

TEST(PassReplay, TurnedOffByTheCallerItRunsEveryPass) {
  NamingBackend backend;
  PassReplay replay(backend);
  replay.turn_off("2 ranks: gradients are reduced during the pass");
  for (int i = 0; i < 3; ++i) replay.run(0, pass(backend, 0));
  EXPECT_EQ(work_of(backend.log).size(), 6u);
  EXPECT_EQ(work_of(backend.log).back(), "run 0b");
  EXPECT_EQ(replay.describe(), "off: 2 ranks: gradients are reduced during the pass");
}

// Pass 0 run and recorded; then the backend replaces a buffer (its recordings are stale) and the log restarts.
void record_then_make_stale(NamingBackend& backend, PassReplay& replay) {
  for (int i = 0; i < 2; ++i) replay.run(0, pass(backend, 0));
  backend.log.clear();
  backend.stale = true;
}

TEST(PassReplay, ARecordingThatStaysStaleTurnsReplayOff) {
  NamingBackend backend;
  PassReplay replay(backend);
  record_then_make_stale(backend, replay);
  replay.run(0, pass(backend, 0));
  EXPECT_EQ(work_of(backend.log), (std::vector<std::string>{"record 0f", "record 0b", "run 0f", "run 0b"}));
  EXPECT_EQ(replay.describe(), "off: a recording went stale as soon as it was made");
}

TEST(PassReplay, ARecordingStaleOnceIsRecordedAgainAndReplayed) {
  NamingBackend backend;
  PassReplay replay(backend);
  record_then_make_stale(backend, replay);
  // Stale until a new recording is made: the fake turns fresh as its first segment is recorded again.
  PassReplay::Segments segments = pass(backend, 0);
  segments[0] = [&backend, first = segments[0]] {
    backend.stale = false;
    first();
  };
  replay.run(0, segments);
  EXPECT_EQ(work_of(backend.log), (std::vector<std::string>{"record 0f", "record 0b", "replay 0f", "replay 0b"}));
  EXPECT_EQ(replay.describe(), "on (1 recorded pass)");
}

}  // namespace
}  // namespace zb
