// CUPTI's record of the GPU's work (kernels/device_activity.h). CUPTI's activity API is process-wide: the clock
// and buffer callbacks are registered once for the process, and the record kinds are enabled from start() to
// stop(). Records arrive in buffers, on CUPTI's worker thread or on the thread that flushes, and are parsed into
// one store; stop() turns what the store holds into slices.
#include <cupti.h>
#include <cxxabi.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/trace.h"
#include "kernels/device_activity.h"

namespace zb {
namespace {

// What the person running the program can do where CUPTI is not this process's to use.
const char* remedy(CUptiResult status) {
  switch (status) {
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
    case CUPTI_ERROR_NOT_COMPATIBLE:
      return " (another profiler holds CUPTI: Nsight Systems, Nsight Compute or a CUDA_INJECTION64_PATH library)";
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      return " (the driver allows profiling to administrators only: NVreg_RestrictProfilingToAdminUsers)";
    default: return "";
  }
}

void check(CUptiResult status, const std::string& call) {
  if (status == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  if (cuptiGetResultString(status, &text) != CUPTI_SUCCESS || !text) text = "an unknown CUPTI status";
  throw Error(cat(call, " failed: ", text, " (CUPTI status ", int(status), ")", remedy(status)));
}

struct KernelRecord {
  uint64_t start = 0, end = 0;
  uint32_t stream = 0, correlation = 0;
  int32_t grid[3] = {}, block[3] = {};
  std::string name;  // as CUPTI has it (mangled): demangled once per name when slices are made
};

// A memcpy or a memset.
struct TransferRecord {
  uint64_t start = 0, end = 0;
  uint32_t stream = 0, correlation = 0;
  uint64_t bytes = 0;
  const char* name = "";
  std::string detail;
};

struct Records {
  std::vector<KernelRecord> kernels;
  std::vector<TransferRecord> transfers;
  std::unordered_map<uint32_t, uint64_t> scope_of;  // CUPTI's correlation id -> the launching TraceScope's id
  size_t dropped = 0;                               // records CUPTI had no buffer space for
  bool unreadable = false;                          // a buffer could not be parsed (no memory for the store)
};

// Filled by the buffer callback, emptied by start() and stop(). Never destroyed: CUPTI may hand back a buffer
// from its own exit handler, after static objects are gone.
struct RecordStore {
  std::mutex mutex;
  Records records;
};

RecordStore& store() {
  static auto* const instance = new RecordStore;
  return *instance;
}

const char* host_memory(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return "pinned";
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return "pageable";
    default: return nullptr;
  }
}

// "HtoD pinned": the direction, and the host side's memory where CUPTI knows it.
std::string direction_with(const char* direction, const char* host_side) {
  return host_side ? cat(direction, " ", host_side) : std::string(direction);
}

std::string copy_detail(const CUpti_ActivityMemcpy6& copy) {
  switch (copy.copyKind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return direction_with("HtoD", host_memory(copy.srcKind));
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return direction_with("DtoH", host_memory(copy.dstKind));
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: {
      const char* from = host_memory(copy.srcKind);
      const char* to = host_memory(copy.dstKind);
      return from && to ? cat("HtoH ", from, " to ", to) : std::string("HtoH");
    }
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return direction_with("HtoA", host_memory(copy.srcKind));
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return direction_with("AtoH", host_memory(copy.dstKind));
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "DtoA";
    default: return "unknown direction";
  }
}

// The record structs are those of the installed CUPTI: CUPTI writes the newest version of each kind's record.
void add_record(const CUpti_Activity& record, Records& records) {
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& kernel = reinterpret_cast<const CUpti_ActivityKernel10&>(record);
      KernelRecord& r = records.kernels.emplace_back();
      r.start = kernel.start, r.end = kernel.end;
      r.stream = kernel.streamId, r.correlation = kernel.correlationId;
      r.grid[0] = kernel.gridX, r.grid[1] = kernel.gridY, r.grid[2] = kernel.gridZ;
      r.block[0] = kernel.blockX, r.block[1] = kernel.blockY, r.block[2] = kernel.blockZ;
      r.name = kernel.name ? kernel.name : "unnamed kernel";
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& copy = reinterpret_cast<const CUpti_ActivityMemcpy6&>(record);
      records.transfers.push_back(
          {copy.start, copy.end, copy.streamId, copy.correlationId, copy.bytes, "memcpy", copy_detail(copy)});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& set = reinterpret_cast<const CUpti_ActivityMemset4&>(record);
      records.transfers.push_back({set.start, set.end, set.streamId, set.correlationId, set.bytes, "memset", "memset"});
      break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto& link = reinterpret_cast<const CUpti_ActivityExternalCorrelation&>(record);
      if (link.externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
        records.scope_of[link.correlationId] = link.externalId;
      break;
    }
    default:  // the API records that carry the correlation (see kRecordedKinds)
      break;
  }
}

constexpr size_t kBufferBytes = size_t(16) << 20;
constexpr size_t kBufferAlignment = 8;  // CUPTI's requirement for activity buffers

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // none: CUPTI drops records, and counts them
  *max_records = 0;                    // as many as fit
}

// Runs on CUPTI's threads: it must not throw into CUPTI.
void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid_bytes) {
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) != CUPTI_SUCCESS) dropped = 0;
  RecordStore& s = store();
  {
    std::lock_guard lock(s.mutex);
    try {
      CUpti_Activity* record = nullptr;
      while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) add_record(*record, s.records);
    } catch (...) {
      s.records.unreadable = true;
    }
    s.records.dropped += dropped;
  }
  std::free(buffer);
}

uint64_t CUPTIAPI trace_clock_for_cupti() {
  return uint64_t(trace_clock_ns());
}

// CUPTI writes an EXTERNAL_CORRELATION record only beside the record of a driver or runtime API call made inside
// a pushed scope, so those two kinds are on as well (their own records are skipped). Both are on because work
// carries the correlation id of the call that launched it, a runtime call or a driver call (libraries such as
// cuBLASLt launch through the driver): the scopes of both kinds of call are kept.
constexpr CUpti_ActivityKind kRecordedKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,    CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_RUNTIME};

std::string enable_call(CUpti_ActivityKind kind, const char* function) {
  return cat(function, "(activity kind ", int(kind), ")");
}

// Registers the clock and the buffers, once per process (the clock before any kind is enabled, or records made
// earlier keep CUPTI's own clock), and checks that CUPTI lets this process enable a kind at all. Retried on the next
// call where it failed.
void initialise_cupti() {
  static std::once_flag once;
  std::call_once(once, [] {
    check(cuptiActivityRegisterTimestampCallback(trace_clock_for_cupti), "cuptiActivityRegisterTimestampCallback");
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    const CUpti_ActivityKind probe = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    check(cuptiActivityEnable(probe), enable_call(probe, "cuptiActivityEnable"));
    check(cuptiActivityDisable(probe), enable_call(probe, "cuptiActivityDisable"));
  });
}

std::atomic<bool> a_source_records{false};

// The launch hooks run in TraceScope's constructor and destructor, which must not throw: the first failure of
// each is kept for stop() to report.
std::atomic<CUptiResult> push_failure{CUPTI_SUCCESS}, pop_failure{CUPTI_SUCCESS};

void keep_first(std::atomic<CUptiResult>& failure, CUptiResult status) {
  CUptiResult none = CUPTI_SUCCESS;
  if (status != CUPTI_SUCCESS) failure.compare_exchange_strong(none, status);
}

void push_scope(uint64_t id) {
  keep_first(push_failure, cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id));
}

void pop_scope() {
  uint64_t popped = 0;
  keep_first(pop_failure, cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped));
}

std::string demangled(const std::string& name) {
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> plain(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status),
                                                          &std::free);
  return status == 0 && plain ? std::string(plain.get()) : name;
}

// CUPTI reports a start of 0 where it could not time the work.
bool timed(uint64_t start, uint64_t end) {
  return start != 0 && end >= start;
}

class CuptiActivity final : public DeviceActivity {
 public:
  explicit CuptiActivity(int ordinal) : ordinal_(ordinal) {}
  ~CuptiActivity() override {
    if (recording_) end_recording();
  }
  CuptiActivity(const CuptiActivity&) = delete;
  CuptiActivity& operator=(const CuptiActivity&) = delete;

  void start() override;
  void stop(std::vector<TraceSlice>& out) override;
  void name_stream(void* stream, const std::string& name) override;
  std::map<uint32_t, std::string> stream_names() const override;

 private:
  struct Failure {
    CUptiResult status = CUPTI_SUCCESS;
    std::string call;
  };
  Failure end_recording() noexcept;
  void append_slices(const Records& records, std::vector<TraceSlice>& out);

  int ordinal_;
  bool recording_ = false;
  std::map<uint32_t, std::string> named_streams_;
  std::set<uint32_t> streams_with_work_;
};

void CuptiActivity::start() {
  if (recording_) throw Error(cat("GPU ", ordinal_, "'s activity: start() while recording"));
  if (a_source_records.exchange(true))
    throw Error(cat("GPU ", ordinal_, "'s activity: another source records already (CUPTI is process-wide)"));
  {
    std::lock_guard lock(store().mutex);
    store().records = Records{};
  }
  push_failure = CUPTI_SUCCESS;
  pop_failure = CUPTI_SUCCESS;
  size_t enabled = 0;
  try {
    for (const CUpti_ActivityKind kind : kRecordedKinds) {
      check(cuptiActivityEnable(kind), enable_call(kind, "cuptiActivityEnable"));
      ++enabled;
    }
  } catch (...) {
    // The enable's failure is what the caller hears of; undoing the others is best effort.
    for (size_t i = 0; i < enabled; ++i) (void)cuptiActivityDisable(kRecordedKinds[i]);
    a_source_records = false;
    throw;
  }
  Tracer::get().set_launch_hooks(push_scope, pop_scope);
  recording_ = true;
}

constexpr const char* kForcedFlush = "cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)";

// The hooks go first (no scope pushes after this). A forced flush delivers every buffer, the kinds are
// disabled, and a second flush delivers what was recorded between the two, so that nothing of this window
// reaches the next one.
CuptiActivity::Failure CuptiActivity::end_recording() noexcept {
  Tracer::get().set_launch_hooks(nullptr, nullptr);
  recording_ = false;
  Failure first;
  const auto keep = [&](CUptiResult status, const char* call) {
    if (status != CUPTI_SUCCESS && first.status == CUPTI_SUCCESS) first = {status, call};
  };
  keep(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), kForcedFlush);
  for (const CUpti_ActivityKind kind : kRecordedKinds) keep(cuptiActivityDisable(kind), "cuptiActivityDisable");
  keep(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), kForcedFlush);
  a_source_records = false;
  return first;
}

void CuptiActivity::stop(std::vector<TraceSlice>& out) {
  if (!recording_) throw Error(cat("GPU ", ordinal_, "'s activity: stop() without start()"));
  const Failure failure = end_recording();
  check(failure.status, failure.call);
  Records records;
  {
    std::lock_guard lock(store().mutex);
    records = std::exchange(store().records, Records{});
  }
  check(push_failure, "cuptiActivityPushExternalCorrelationId (a TraceScope's launch hook)");
  check(pop_failure, "cuptiActivityPopExternalCorrelationId (a TraceScope's launch hook)");
  if (records.dropped)
    log_warn("GPU ", ordinal_, "'s activity: CUPTI dropped ", records.dropped,
             " records for want of buffer space: the trace misses some of the device's work");
  if (records.unreadable)
    log_warn("GPU ", ordinal_,
             "'s activity: a CUPTI buffer could not be stored (out of memory): the trace misses "
             "some of the device's work");
  append_slices(records, out);
}

void CuptiActivity::append_slices(const Records& records, std::vector<TraceSlice>& out) {
  const auto launched_by = [&](uint32_t correlation) {
    const auto it = records.scope_of.find(correlation);
    return it == records.scope_of.end() ? uint64_t(0) : it->second;
  };
  std::unordered_map<std::string, std::string> names;  // a kernel runs many times: demangled once
  for (const KernelRecord& kernel : records.kernels) {
    if (!timed(kernel.start, kernel.end)) continue;
    auto [name, is_new] = names.try_emplace(kernel.name);
    if (is_new) name->second = demangled(kernel.name);
    TraceSlice& slice = out.emplace_back();
    slice.start_ns = int64_t(kernel.start), slice.end_ns = int64_t(kernel.end);
    slice.category = name->second.starts_with("nccl") ? TraceCategory::collective : TraceCategory::kernel;
    slice.lane = {true, kernel.stream};
    slice.name = name->second;
    slice.launched_by = launched_by(kernel.correlation);
    slice.detail = cat("grid [", kernel.grid[0], ",", kernel.grid[1], ",", kernel.grid[2], "] block [", kernel.block[0],
                       ",", kernel.block[1], ",", kernel.block[2], "]");
    streams_with_work_.insert(kernel.stream);
  }
  for (const TransferRecord& transfer : records.transfers) {
    if (!timed(transfer.start, transfer.end)) continue;
    TraceSlice& slice = out.emplace_back();
    slice.start_ns = int64_t(transfer.start), slice.end_ns = int64_t(transfer.end);
    slice.category = TraceCategory::copy;
    slice.lane = {true, transfer.stream};
    slice.name = transfer.name;
    slice.launched_by = launched_by(transfer.correlation);
    slice.bytes = double(transfer.bytes);
    slice.detail = transfer.detail;
    streams_with_work_.insert(transfer.stream);
  }
}

void CuptiActivity::name_stream(void* stream, const std::string& name) {
  uint32_t id = 0;
  // No context: CUPTI finds the stream's own (one given would only be checked against it). Not per-thread: the
  // program's default stream is the legacy one.
  check(cuptiGetStreamIdEx(nullptr, static_cast<CUstream>(stream), 0, &id), "cuptiGetStreamIdEx");
  named_streams_[id] = name;
}

std::map<uint32_t, std::string> CuptiActivity::stream_names() const {
  std::map<uint32_t, std::string> names = named_streams_;
  for (const uint32_t stream : streams_with_work_) names.try_emplace(stream, cat("stream ", stream));
  return names;
}

}  // namespace

std::unique_ptr<DeviceActivity> make_cupti_activity(int ordinal) {
  try {
    initialise_cupti();
  } catch (const Error& e) {
    throw Error(cat("CUPTI cannot record GPU ", ordinal, "'s work, so a profile would miss its kernels, copies and ",
                    "memsets: ", e.what()));
  }
  return std::make_unique<CuptiActivity>(ordinal);
}

}  // namespace zb
