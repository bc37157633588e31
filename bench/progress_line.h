// One progress line on stderr for the programs that run configurations one after another (zero_bench,
// offload_bench, sweep): redrawn in place on a terminal, one line a step otherwise (logs).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "bench/bench_runner.h"
#include "core/strings.h"

namespace zb {

class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled), terminal_(::isatty(STDERR_FILENO) == 1) {}
  ~ProgressLine() { finish(); }

  // The time left is the time so far per step done, times the steps left.
  void show(const RunProgress& p, int64_t steps_done, int64_t steps_total) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    show(p, steps_done > 0 ? elapsed / double(steps_done) * double(steps_total - steps_done) : 0);
  }
  void show(const RunProgress& p, double seconds_left) {
    if (!enabled_) return;
    const std::string text = cat("configuration ", p.configuration, "/", p.configurations, " (", p.label, "): step ",
                                 p.step, "/", p.steps, ", ETA ", int64_t(seconds_left + 0.5), " s");
    std::fprintf(stderr, terminal_ ? "\r%-100s" : "%s\n", text.c_str());
    std::fflush(stderr);
    drawn_ = terminal_;
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  bool enabled_, terminal_, drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace zb
