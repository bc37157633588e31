#include "bench/profiler.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>

#include "bench/atomic_file.h"
#include "bench/chrome_trace.h"
#include "bench/profile_timeline.h"
#include "core/errors.h"

namespace zb {

namespace {

std::string steps_text(const std::vector<int64_t>& steps) {
  if (steps.empty()) return "none";
  return std::to_string(steps.front()) + "-" + std::to_string(steps.back());
}

}  // namespace

Profiler::Profiler(const ProfileOptions& options, std::string config, int64_t last_step, ProfileContext context)
    : options_(options),
      config_(std::move(config)),
      schedule_(options.schedule_for(last_step)),
      context_(std::move(context)) {
  bool records = false;
  for (int64_t step = 1; step <= last_step && !records; ++step) {
    const ProfileAction action = schedule_.action(step);
    records = action == ProfileAction::record || action == ProfileAction::record_and_save;
  }
  if (!records && context_.print)
    warn("--profile-schedule " + schedule_.describe() + " records none of the " + std::to_string(last_step) +
         " steps of " + config_);
}

bool Profiler::profiles(int64_t step) const { return schedule_.action(step) != ProfileAction::none; }

int64_t Profiler::unprofiled_steps(int64_t first, int64_t last) const {
  int64_t count = 0;
  for (int64_t step = first; step <= last; ++step) count += profiles(step) ? 0 : 1;
  return count;
}

Profiler::~Profiler() { close_without_writing(); }

void Profiler::before_step(int64_t step) {
  const ProfileAction action = schedule_.action(step);
  if (action == ProfileAction::none) return;
  if (!open_) open_window();
  if (action == ProfileAction::warmup) return;
  if (!recording_) {
    // The warm-up steps' host slices go; the device's are dropped by time when the window is written.
    Tracer::get().close();
    Tracer::get().open();
    recording_ = true;
  }
  steps_.push_back(step);
  step_scope_.emplace(TraceCategory::step, "ProfilerStep#" + std::to_string(step));
}

void Profiler::end_step_slice() { step_scope_.reset(); }

void Profiler::after_step(int64_t step) {
  step_scope_.reset();
  if (open_ && schedule_.action(step) == ProfileAction::record_and_save) write_window();
}

void Profiler::finish() {
  step_scope_.reset();
  if (open_ && !steps_.empty()) {
    write_window();
  } else {
    close_without_writing();
  }
}

void Profiler::open_window() {
  // Rank 0's clock: every rank reads its own right after a barrier, and learns rank 0's reading. The error is
  // how far apart the ranks leave the barrier (microseconds on one host), below any collective's skew.
  clock_offset_ns_ = 0;
  if (context_.comm && context_.world > 1) {
    context_.comm->barrier();
    const int64_t mine = trace_clock_ns();
    const double rank0 = context_.comm->sum_over_ranks(context_.rank == 0 ? double(mine) : 0.0);
    clock_offset_ns_ = int64_t(rank0) - mine;
  }
  if (context_.activity) {
    try {
      context_.activity->start();
    } catch (const std::exception& e) {
      warn(std::string("the device's work cannot be recorded (") + e.what() + "); this window has the host's only");
      context_.activity = nullptr;
    }
  }
  Tracer::get().name_this_thread("main");
  Tracer::get().open();
  open_ = true;
  recording_ = false;
  steps_.clear();
}

void Profiler::close_without_writing() noexcept {
  step_scope_.reset();
  if (!open_) return;
  Tracer::get().close();
  if (context_.activity) {
    // (The run is failing already; its own error is the one to report. The device is stopped recording even
    // where the synchronisation fails, or every later window would find it recording still.)
    try {
      if (context_.backend) context_.backend->synchronize();  // (stop's contract: the recorded work has finished)
    } catch (const std::exception&) {
    }
    try {
      std::vector<TraceSlice> dropped;
      context_.activity->stop(dropped);
    } catch (const std::exception&) {
    }
  }
  open_ = false;
  recording_ = false;
}

ProfileWindow Profiler::window_of(std::vector<TraceSlice> slices) const {
  ProfileWindow w;
  w.config = config_;
  w.rank = context_.rank;
  w.world = context_.world;
  w.ops_run_on_host = context_.ops_run_on_host;
  w.device_name = context_.device_name;
  std::vector<std::pair<int64_t, int64_t>> steps;  // recorded steps' spans, by start
  for (const TraceSlice& s : slices)
    if (s.category == TraceCategory::step) steps.push_back({s.start_ns, s.end_ns});
  std::sort(steps.begin(), steps.end());
  // A device collective carries its launch's bytes where the launch ran that one collective (a group's single
  // kernel included), so that the trace shows its bus bandwidth where it ran.
  std::map<uint64_t, double> launch_bytes;
  std::map<uint64_t, int> collectives_launched;
  for (const TraceSlice& s : slices) {
    if (!s.lane.device && s.id != 0) launch_bytes.emplace(s.id, s.bytes);
    if (s.lane.device && s.category == TraceCategory::collective) ++collectives_launched[s.launched_by];
  }
  for (TraceSlice& s : slices) {
    const auto launch = launch_bytes.find(s.launched_by);
    if (s.lane.device && s.category == TraceCategory::collective && s.bytes == 0 && launch != launch_bytes.end() &&
        collectives_launched[s.launched_by] == 1)
      s.bytes = launch->second;
  }
  for (const TraceSlice& s : slices) {
    // Its part in each step it overlaps (a host update that began before the step, or runs on into the next):
    // what lies between the steps is not part of the window. Its work (bytes, FLOPs) goes with its first part.
    bool first_part = true;
    for (const auto& [step_start, step_end] : steps) {
      const int64_t start = std::max(s.start_ns, step_start), end = std::min(s.end_ns, step_end);
      if (start > end || (start == end && s.start_ns != s.end_ns)) continue;
      TraceSlice part = s;
      part.start_ns = start + clock_offset_ns_;
      part.end_ns = end + clock_offset_ns_;
      if (!first_part) part.bytes = part.flops = 0;
      first_part = false;
      w.slices.push_back(std::move(part));
    }
  }
  for (const auto& [id, name] : Tracer::get().thread_names()) w.lane_names[{false, id}] = name;
  if (context_.activity)
    for (const auto& [id, name] : context_.activity->stream_names()) w.lane_names[{true, id}] = name;
  return w;
}

// A profile that cannot be taken or written (a full disk, a device that stops recording) is reported and the run
// goes on: the training is what the user came for.
void Profiler::write_window() {
  try {
    write_window_files();
  } catch (const std::exception& e) {
    close_without_writing();
    warn(std::string("the window of steps ") + steps_text(steps_) + " was not written: " + e.what());
  }
  steps_.clear();
}

void Profiler::warn(const std::string& what) const {
  std::fprintf(stderr, "warning: profile, rank %d: %s\n", context_.rank, what.c_str());
  std::fflush(stderr);
}

void Profiler::write_window_files() {
  if (context_.backend) context_.backend->synchronize();  // the device's work of the window, finished
  std::vector<TraceSlice> slices = Tracer::get().close();
  open_ = false;
  recording_ = false;
  if (context_.activity) context_.activity->stop(slices);
  ProfiledWindow written;
  written.steps = steps_;
  ProfileWindow window = window_of(std::move(slices));
  window.device_work_recorded = context_.ops_run_on_host || context_.activity != nullptr;
  written.summary = summarise(window, context_.ceilings);
  written.breakdown = step_breakdown(window);
  written.device_work_recorded = window.device_work_recorded;
  if (!options_.writes_files()) {
    written.label = config_ + "_steps" + steps_text(steps_);
    windows_.push_back(std::move(written));
    return;
  }
  // A name no earlier run used in this folder.
  namespace fs = std::filesystem;
  const std::string base = config_ + "_steps" + steps_text(steps_);
  const auto path = [&](const char* kind, const std::string& label, const char* extension) {
    return (fs::path(options_.dir) / (std::string(kind) + "_" + label + "_rank" + std::to_string(context_.rank) +
                                      extension)).string();
  };
  std::string label = base;
  for (int n = 2; fs::exists(path("trace", label, ".json.gz")) || fs::exists(path("profile", label, ".txt")) ||
                  fs::exists(path("timeline", label, ".svg"));
       ++n) {
    label = base + "_" + std::to_string(n);
  }
  written.label = label;
  const std::string text = format_summary(window, written.summary, context_.ceilings);
  write_gzip_file(path("trace", label, ".json.gz"), chrome_trace(window).dump());
  write_file_atomically(path("profile", label, ".txt"), text);
  const std::vector<const TraceSlice*> steps = window_steps(window);
  if (!steps.empty()) {
    const TraceSlice& last = *steps.back();
    write_file_atomically(path("timeline", label, ".svg"),
                          render_timeline_svg(config_ + ", " + last.name + ", rank " + std::to_string(context_.rank),
                                              window, last.start_ns, last.end_ns));
  }
  written.files = {path("trace", label, ".json.gz"), path("profile", label, ".txt"), path("timeline", label, ".svg")};
  if (context_.print) {
    std::printf("\n%s(trace, summary and timeline of rank %d in %s)\n", text.c_str(), context_.rank,
                options_.dir.c_str());
    std::fflush(stdout);
  }
  windows_.push_back(std::move(written));
}

std::optional<ProfileRecordFields> profile_record_fields(const std::vector<ProfiledWindow>& windows) {
  if (windows.empty() || windows.front().summary.steps.empty() || !windows.front().device_work_recorded)
    return std::nullopt;
  const ProfiledWindow& w = windows.front();
  ProfileRecordFields fields;
  fields.exposed_ms = w.summary.mean.exposed_ms;
  fields.bottleneck = exposed_category_name(w.summary.bottleneck);
  fields.steps = steps_text(w.steps);
  return fields;
}

void fill_profile(BenchRecord& record, const ProfileRecordFields& fields) {
  const auto& e = fields.exposed_ms;
  record.exposed_compute_ms = e[size_t(ExposedCategory::compute)];
  record.exposed_collectives_ms = e[size_t(ExposedCategory::collectives)];
  record.exposed_copies_ms = e[size_t(ExposedCategory::copies)];
  record.exposed_cpu_optimizer_ms = e[size_t(ExposedCategory::cpu_optimizer)];
  record.exposed_nvme_ms = e[size_t(ExposedCategory::nvme)];
  record.exposed_idle_ms = e[size_t(ExposedCategory::idle)];
  record.profile_bottleneck = fields.bottleneck;
  record.profile_steps = fields.steps;
}

std::string profile_file_label(const std::string& label) {
  std::string out;
  for (char c : label) {
    const bool kept = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
    if (kept) {
      out += c;
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "run" : out;
}

std::unique_ptr<DeviceActivity> device_activity_or_warning(const Device& device, const Backend& backend,
                                                           const Communicator& comm, bool warn) {
  std::vector<std::pair<void*, std::string>> streams = backend.named_streams();
  streams.push_back({comm.stream(), "communication"});
  try {
    std::unique_ptr<DeviceActivity> activity = make_device_activity(device);
    if (activity)
      for (const auto& [stream, name] : streams)
        if (stream) activity->name_stream(stream, name);
    if (!activity && device.is_cuda() && warn) {
      std::fprintf(stderr,
                   "warning: profile: this build has no CUPTI, so the traces (and a sweep's unit times) hold the "
                   "host's slices only (no kernels, copies or device collectives)\n");
    }
    return activity;
  } catch (const std::exception& e) {
    if (warn) {
      std::fprintf(stderr, "warning: profile: the GPU's own work cannot be recorded (%s); the traces (and a sweep's "
                           "unit times) hold the host's slices only\n", e.what());
    }
    return nullptr;
  }
}

}  // namespace zb
