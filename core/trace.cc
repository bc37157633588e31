#include "core/trace.h"

#include <time.h>

#if defined(ZB_WITH_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace zb {

namespace {

bool launches(TraceCategory c) { return c == TraceCategory::op || c == TraceCategory::collective; }
bool marks_nvtx(TraceCategory c) { return c == TraceCategory::step || c == TraceCategory::unit; }

thread_local uint32_t this_thread_lane = 0;  // 0: not numbered yet

}  // namespace

const char* trace_category_name(TraceCategory category) {
  switch (category) {
    case TraceCategory::step: return "step";
    case TraceCategory::unit: return "unit";
    case TraceCategory::op: return "op";
    case TraceCategory::kernel: return "kernel";
    case TraceCategory::collective: return "collective";
    case TraceCategory::copy: return "copy";
    case TraceCategory::cpu_optimizer: return "cpu_optimizer";
    case TraceCategory::nvme: return "nvme";
    case TraceCategory::wait: return "wait";
  }
  return "?";
}

int64_t trace_clock_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

Tracer& Tracer::get() {
  static Tracer tracer;
  return tracer;
}

void Tracer::open() {
  std::lock_guard<std::mutex> lock(mutex_);
  slices_.clear();
  open_.store(true, std::memory_order_relaxed);
}

std::vector<TraceSlice> Tracer::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  open_.store(false, std::memory_order_relaxed);
  std::vector<TraceSlice> out;
  out.swap(slices_);
  return out;
}

void Tracer::add(TraceSlice slice) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (open_.load(std::memory_order_relaxed)) slices_.push_back(std::move(slice));
}

TraceLane Tracer::this_thread() {
  if (this_thread_lane == 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    this_thread_lane = ++threads_;
    thread_names_.emplace(this_thread_lane, "thread " + std::to_string(this_thread_lane));
  }
  return {false, this_thread_lane};
}

void Tracer::name_this_thread(const std::string& name) {
  const uint32_t lane = this_thread().id;
  std::lock_guard<std::mutex> lock(mutex_);
  thread_names_[lane] = name;
}

TraceLane Tracer::shared_lane(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto [it, added] = shared_lanes_.emplace(name, 0);
  if (added) {
    it->second = ++threads_;
    thread_names_[it->second] = name;
  }
  return {false, it->second};
}

std::map<uint32_t, std::string> Tracer::thread_names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return thread_names_;
}

TraceScope::TraceScope(TraceCategory category, std::string_view name, double flops, double bytes)
    : nvtx_(marks_nvtx(category)) {
#if defined(ZB_WITH_NVTX)
  if (nvtx_) nvtxRangePushA(std::string(name).c_str());
#endif
  Tracer& tracer = Tracer::get();
  if (!tracer.is_open()) return;
  recording_ = true;
  slice_.category = category;
  slice_.name = name;
  slice_.lane = tracer.this_thread();
  slice_.flops = flops;
  slice_.bytes = bytes;
  if (launches(category)) {
    slice_.id = tracer.new_id();
    const Tracer::Push push = tracer.push_hook();
    const Tracer::Pop pop = tracer.pop_hook();
    if (push && pop) push(slice_.id), pop_ = pop;
  }
  slice_.start_ns = trace_clock_ns();
}

TraceScope::~TraceScope() {
  if (recording_) {
    slice_.end_ns = trace_clock_ns();
    Tracer& tracer = Tracer::get();
    if (pop_) pop_();
    tracer.add(std::move(slice_));
  }
#if defined(ZB_WITH_NVTX)
  if (nvtx_) nvtxRangePop();
#endif
}

void TraceScope::set_detail(std::string detail) {
  if (recording_) slice_.detail = std::move(detail);
}

void TraceScope::add_bytes(double bytes) {
  if (recording_) slice_.bytes += bytes;
}

void TraceScope::move_to(TraceLane lane) {
  if (recording_) slice_.lane = lane;
}

}  // namespace zb
