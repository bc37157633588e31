// Profiler: the --profile-dir of train, zero_bench and offload_bench for one configuration's run. It follows the
// schedule (core/profile_schedule.h; without one, the run's last three steps): at a window's first active step it
// opens the tracer (core/trace.h) and the device's activity (kernels/device_activity.h), wraps each recorded step
// in a ProfilerStep#N slice (N as the programs number steps, warm-up included), and after a window's last step
// writes, per rank:
//   trace_<config>_steps<a>-<b>_rank<r>.json.gz   the Chrome trace (bench/chrome_trace.h)
//   profile_<config>_steps<a>-<b>_rank<r>.txt     the summary (bench/profile_summary.h)
//   timeline_<config>_steps<a>-<b>_rank<r>.svg    the window's last step as a picture (bench/profile_timeline.h)
// (a "_2", "_3", ... after the steps where such files exist: nothing is overwritten). Outside a window the
// programs run as without a profile, but for a relaxed atomic load a traced call. A window that cannot be taken
// or written is reported on stderr and the run goes on.
//
// Every rank must run the same steps with the same schedule: opening a window agrees on a clock (rank 0's) with
// the others, so that their traces line up.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_record.h"
#include "bench/profile_options.h"
#include "bench/profile_summary.h"
#include "bench/step_breakdown.h"
#include "comm/communicator.h"
#include "core/profile_schedule.h"
#include "kernels/backend.h"
#include "kernels/device_activity.h"

namespace zb {

// What the profiler needs of the program: where the work runs and who else takes part.
struct ProfileContext {
  Backend* backend = nullptr;          // synchronised before a window is written
  DeviceActivity* activity = nullptr;  // null: host slices only (the CPU backend, or no CUPTI)
  Communicator* comm = nullptr;        // the ranks, for a common clock (null: this process alone)
  int rank = 0, world = 1;
  std::string device_name;
  bool ops_run_on_host = false;  // the CPU backend
  DeviceCeilings ceilings;
  bool print = false;  // this rank prints each window's summary
};

// A written window: its steps, summary and files.
struct ProfiledWindow {
  std::string label;  // "<config>_steps<a>-<b>"
  std::vector<int64_t> steps;
  ProfileSummary summary;
  StepBreakdown breakdown;
  bool device_work_recorded = true;  // (ProfileWindow's)
  std::vector<std::string> files;    // none without a folder (ProfileOptions::in_memory)
};

class Profiler {
 public:
  // `config` names the files ("stage3", "cpu_full_stage3", "train"); the run's steps are 1..last_step.
  Profiler(const ProfileOptions& options, std::string config, int64_t last_step, ProfileContext context);
  ~Profiler();  // a window left open (the run failed inside it) is closed, not written
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  void before_step(int64_t step);
  // Ends the step's slice (after_step does, where this was not called): the step as the trace shows it ends
  // here, before what the program does between steps (printing its line).
  void end_step_slice();
  void after_step(int64_t step);
  // Whether the profiler runs at `step` (warms up or records): such steps are not the program's unprofiled pace.
  bool profiles(int64_t step) const;
  // How many of steps first..last (1-based, inclusive) the profiler leaves alone.
  int64_t unprofiled_steps(int64_t first, int64_t last) const;
  // The run ended (its last step or earlier): a window it ended inside is written with its recorded steps.
  void finish();
  const std::vector<ProfiledWindow>& windows() const { return windows_; }

 private:
  void open_window();
  void write_window();
  void write_window_files();
  void warn(const std::string& what) const;
  void close_without_writing() noexcept;
  // The window as the files show it: the slices in its steps, clipped to them, on rank 0's clock.
  ProfileWindow window_of(std::vector<TraceSlice> slices) const;

  ProfileOptions options_;
  std::string config_;
  ProfileSchedule schedule_;
  ProfileContext context_;
  bool open_ = false;
  bool recording_ = false;  // a recorded step of the open window has begun
  int64_t clock_offset_ns_ = 0;  // added to this rank's times: rank 0's clock
  std::vector<int64_t> steps_;   // of the open window
  std::optional<TraceScope> step_scope_;
  std::vector<ProfiledWindow> windows_;
};

// The summary's figures for a configuration's record: the first window's mean exposed time by category.
struct ProfileRecordFields {
  std::array<double, kExposedCategories> exposed_ms{};
  std::string bottleneck, steps;  // "compute"; "9-11"
};
std::optional<ProfileRecordFields> profile_record_fields(const std::vector<ProfiledWindow>& windows);
void fill_profile(BenchRecord& record, const ProfileRecordFields& fields);

// A label as part of a file or folder name (a configuration's, a model's, a GPU's): "cpu_optimizer (stage 2), full
// ckpt" gives "cpu_optimizer_stage_2_full_ckpt" (letters, digits, '-' and '.' kept, every other run of characters
// one '_', none at the end; "run" where nothing is left).
std::string profile_file_label(const std::string& label);

// The device's activity source for a profile, its lanes named after the backend's streams and the
// communicator's, or null with a warning on stderr (where `warn`) saying that the traces will hold the host's
// slices only, and why, where the device cannot record its work.
std::unique_ptr<DeviceActivity> device_activity_or_warning(const Device& device, const Backend& backend,
                                                           const Communicator& comm, bool warn);

}  // namespace zb
