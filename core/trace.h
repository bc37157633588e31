// Tracing of chosen steps: slices of time on lanes (a host thread, a device stream), each with a category and a
// name, collected while the tracer is open. The programs open it over the steps their --profile-schedule
// records and turn the slices into a Chrome trace, a summary and a timeline (bench/profile_*.h). A device's
// own activity (kernels, copies) comes from its activity source (kernels/device_activity.h), on the same clock.
//
// Closed, a scope costs a relaxed atomic load; units also open an NVTX range (and their callers build its name),
// so that Nsight Systems shows them whether or not a profile is taken. Open, a scope takes the clock twice and
// appends under a mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace zb {

enum class TraceCategory : uint8_t {
  step,           // ProfilerStep#N: one training step on the thread that runs it
  unit,           // a unit's forward or backward, where the host queued (GPU) or ran (CPU) it
  op,             // an engine operation: launched there (GPU) or run there (CPU backend)
  kernel,         // device: a kernel of an operation (compute)
  collective,     // a collective: called (host) or run (CPU backend, and the device's NCCL kernels)
  copy,           // a copy between host and device, or within the device
  cpu_optimizer,  // the host's update of (part of) a unit, on one of its threads
  nvme,           // a read or write of the NVMe strategy's files
  wait,           // a thread waiting: on the device, a copy, the host update, the other ranks
};
const char* trace_category_name(TraceCategory category);

// Where a slice lies: a host thread (numbered by the tracer) or a device stream (numbered by the device).
struct TraceLane {
  bool device = false;
  uint32_t id = 0;
  bool operator<(const TraceLane& o) const { return device != o.device ? device < o.device : id < o.id; }
  bool operator==(const TraceLane& o) const { return device == o.device && id == o.id; }
};

struct TraceSlice {
  int64_t start_ns = 0, end_ns = 0;  // trace_clock_ns()
  TraceCategory category = TraceCategory::op;
  TraceLane lane;
  std::string name;
  // Scopes that launch device work (ops, collectives): a number the device's records of that work carry back
  // as launched_by (0: none).
  uint64_t id = 0, launched_by = 0;
  double flops = 0, bytes = 0;  // the work's floating-point operations and bytes moved (0: not known)
  std::string detail;           // what else the trace shows of it (a kernel's grid, a copy's direction)
};

// The clock of every slice: CLOCK_MONOTONIC in nanoseconds (one clock for every process of a host).
int64_t trace_clock_ns();

class Tracer {
 public:
  static Tracer& get();

  bool is_open() const { return open_.load(std::memory_order_relaxed); }
  // Starts collecting (the slices of an earlier window are dropped).
  void open();
  // Stops collecting and hands over the window's slices.
  std::vector<TraceSlice> close();
  void add(TraceSlice slice);

  // The calling thread's lane (numbered at its first call) and its name ("thread N" until named).
  TraceLane this_thread();
  void name_this_thread(const std::string& name);
  // A host lane of its own for work that hops between short-lived threads (one NVMe transfer a thread), by
  // name: the same lane for the same name.
  TraceLane shared_lane(const std::string& name);
  std::map<uint32_t, std::string> thread_names() const;
  uint64_t new_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  // A device activity source's hooks, called as a launching scope opens and closes on the thread that launches
  // (its work then carries the scope's id): CUPTI's external correlation. Null: none.
  using Push = void (*)(uint64_t id);
  using Pop = void (*)();
  // Set and read across threads; set them where no launching scope is open (between steps).
  void set_launch_hooks(Push push, Pop pop) {
    push_.store(push, std::memory_order_release);
    pop_.store(pop, std::memory_order_release);
  }
  Push push_hook() const { return push_.load(std::memory_order_acquire); }
  Pop pop_hook() const { return pop_.load(std::memory_order_acquire); }

 private:
  Tracer() = default;
  std::atomic<bool> open_{false};
  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex mutex_;
  std::vector<TraceSlice> slices_;
  std::map<uint32_t, std::string> thread_names_;
  std::map<std::string, uint32_t> shared_lanes_;
  uint32_t threads_ = 0;
  std::atomic<Push> push_{nullptr};
  std::atomic<Pop> pop_{nullptr};
};

// A host slice on the calling thread from construction to destruction, where the tracer is open (at
// construction). Ops and collectives launch device work inside them (launches() true): that work carries their
// id. Steps and units also open an NVTX range (nvtx() true), open or not.
class TraceScope {
 public:
  TraceScope(TraceCategory category, std::string_view name, double flops = 0, double bytes = 0);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
  // Adds to what the trace shows of the slice (ignored when closed).
  void set_detail(std::string detail);
  void add_bytes(double bytes);
  void move_to(TraceLane lane);  // records the slice on `lane` rather than the calling thread's

 private:
  bool recording_ = false, nvtx_ = false;
  Tracer::Pop pop_ = nullptr;  // the hook that undoes this scope's push (that of the source that took it)
  TraceSlice slice_;
};

}  // namespace zb
