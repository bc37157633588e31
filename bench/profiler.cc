#include "bench/profiler.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>

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
      context_(std::move(context)) {}

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
  if (context_.activity) context_.activity->start();
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
    try {
      std::vector<TraceSlice> dropped;
      context_.activity->stop(dropped);
    } catch (const std::exception&) {
      // (the run is failing already; its own error is the one to report)
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
  for (TraceSlice& s : slices) {
    // The step the slice starts in; it is cut at that step's end (a host update running on past it).
    const auto after = std::upper_bound(steps.begin(), steps.end(), std::make_pair(s.start_ns, INT64_MAX));
    if (after == steps.begin()) continue;
    const int64_t end = (after - 1)->second;
    if (s.start_ns >= end) continue;
    s.end_ns = std::min(s.end_ns, end);
    s.start_ns += clock_offset_ns_;
    s.end_ns += clock_offset_ns_;
    w.slices.push_back(std::move(s));
  }
  for (const auto& [id, name] : Tracer::get().thread_names()) w.lane_names[{false, id}] = name;
  if (context_.activity)
    for (const auto& [id, name] : context_.activity->stream_names()) w.lane_names[{true, id}] = name;
  return w;
}

void Profiler::write_window() {
  if (context_.backend) context_.backend->synchronize();  // the device's work of the window, finished
  std::vector<TraceSlice> slices = Tracer::get().close();
  if (context_.activity) context_.activity->stop(slices);
  open_ = false;
  recording_ = false;
  ProfiledWindow written;
  written.steps = steps_;
  const ProfileWindow window = window_of(std::move(slices));
  written.summary = summarise(window, context_.ceilings);
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
  steps_.clear();
}

std::optional<ProfileRecordFields> profile_record_fields(const std::vector<ProfiledWindow>& windows) {
  if (windows.empty() || windows.front().summary.steps.empty()) return std::nullopt;
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

std::unique_ptr<DeviceActivity> device_activity_or_warning(const Device& device, bool warn) {
  try {
    std::unique_ptr<DeviceActivity> activity = make_device_activity(device);
    if (!activity && device.is_cuda() && warn) {
      std::fprintf(stderr, "warning: --profile-dir: this build has no CUPTI, so the traces hold the host's slices "
                           "only (no kernels, copies or device collectives)\n");
    }
    return activity;
  } catch (const std::exception& e) {
    if (warn) {
      std::fprintf(stderr, "warning: --profile-dir: the GPU's own work cannot be recorded (%s); the traces hold "
                           "the host's slices only\n", e.what());
    }
    return nullptr;
  }
}

}  // namespace zb
