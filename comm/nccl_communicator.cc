// The only file that includes nccl.h: NCCL's types stay out of every other translation unit.
#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/collective_checks.h"
#include "comm/mpi_comm.h"
#include "comm/mpi_world.h"
#include "core/check.h"
#include "core/cuda_check.h"

#define ZB_NCCL_CHECK(call)                                                                           \
  do {                                                                                                \
    const ncclResult_t zb_nccl_status_ = (call);                                                      \
    if (zb_nccl_status_ != ncclSuccess) {                                                             \
      throw ::zb::Error(::zb::cat(__FILE__, ":", __LINE__, ": " #call " failed: ",                    \
                                  ncclGetErrorString(zb_nccl_status_)));                              \
    }                                                                                                 \
  } while (0)

namespace zb {
namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::f64: return ncclFloat64;
    default: break;
  }
  throw Error(cat("NcclCommunicator: dtype ", dtype_name(dtype), " is not supported (f32, bf16, f16, f64 are)"));
}

// ncclGetVersion's code: major*1000 + minor*100 + patch up to 2.8, major*10000 + minor*100 + patch since.
std::string version_text(int code) {
  const int major_scale = code < 10000 ? 1000 : 10000;
  return cat(code / major_scale, ".", (code % major_scale) / 100, ".", code % 100);
}

size_t as_count(int64_t numel) { return static_cast<size_t>(numel); }

}  // namespace

std::string nccl_library_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return {};
  return version_text(code);
}

NcclCommunicator::NcclCommunicator(const MpiWorld& world, int cuda_device, void* compute_stream)
    : mpi_(std::make_unique<MpiComm>()),
      rank_(world.rank()),
      size_(world.size()),
      cuda_device_(cuda_device),
      compute_stream_(static_cast<cudaStream_t>(compute_stream)) {
  try {
    ZB_NCCL_CHECK(ncclGetVersion(&nccl_version_));
    // Rank 0 makes the rendezvous id; every rank needs it before ncclCommInitRank, which blocks until all
    // ranks have joined.
    // A failure on rank 0 is shared before anyone blocks in ncclCommInitRank waiting for it.
    ncclUniqueId id{};
    const ncclResult_t id_status = rank_ == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    mpi_->broadcast_bytes(&id, sizeof(id), 0);
    ZB_CHECK(mpi_->all_ok(id_status == ncclSuccess), "ncclGetUniqueId failed on rank 0",
             rank_ == 0 ? cat(": ", ncclGetErrorString(id_status)) : std::string());

    ZB_CUDA_CHECK(cudaSetDevice(cuda_device_));
    // Non-blocking: the communication stream must not synchronise with the legacy default stream, or a
    // compute stream that is the default stream would serialise against every collective.
    ZB_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    ZB_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    for (cudaEvent_t& event : events_) ZB_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    ZB_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() { release(); }

void NcclCommunicator::release() noexcept {
  // Destroying a communicator with work in flight is undefined; wait for it. If the stream reports an
  // error, the collectives may never finish: abort the communicator instead of a destroy that could hang.
  // A group left open (an exception between begin_group and end_group) is closed first, so that its
  // collectives are not left half-issued.
  bool healthy = true;
  if (in_group_) healthy = ncclGroupEnd() == ncclSuccess;
  in_group_ = false;
  if (comm_stream_ != nullptr) healthy = cudaStreamSynchronize(comm_stream_) == cudaSuccess && healthy;
  if (comm_ != nullptr) {
    if (healthy) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  for (std::vector<TimedCopy>* copies : {&copies_in_flight_, &idle_copy_events_}) {
    for (TimedCopy& copy : *copies) cudaEventDestroy(copy.start), cudaEventDestroy(copy.end);
    copies->clear();
  }
  for (cudaEvent_t& event : events_) {
    if (event != nullptr) cudaEventDestroy(event);
    event = nullptr;
  }
  if (compute_ready_ != nullptr) cudaEventDestroy(compute_ready_);
  compute_ready_ = nullptr;
  if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
  comm_stream_ = nullptr;
  cudaGetLastError();  // leave no error of this cleanup behind for the next CUDA call to report
}

std::string NcclCommunicator::describe() const {
  return cat("NCCL ", version_text(nccl_version_), ", ", size_, size_ == 1 ? " rank" : " ranks");
}

cudaEvent_t NcclCommunicator::event_of(CommTicket ticket) const { return events_[ticket % kEventRing]; }

void NcclCommunicator::check_tensor(const Tensor& tensor) const {
  ZB_CHECK(tensor.device == Device::cuda(cuda_device_), "NcclCommunicator on cuda:", cuda_device_,
           " got ", tensor.describe());
}

CommTicket NcclCommunicator::start_collective(const char* kind, double bytes) {
  if (in_group_) {
    group_kind_ = group_kind_.empty() || group_kind_ == kind ? std::string(kind) : std::string("mixed");
    if (trace_scope_) {
      trace_scope_->add_bytes(bytes);
      trace_scope_->set_detail(group_kind_);
    }
    return issued_;  // begin_group already ordered the group after the compute stream
  }
  trace_scope_.emplace(TraceCategory::collective, kind, 0, bytes);  // (closes one a failed collective left open)
  ZB_CUDA_CHECK(cudaEventRecord(compute_ready_, compute_stream_));
  ZB_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, compute_ready_, 0));
  return ++issued_;
}

CommTicket NcclCommunicator::finish_collective(CommTicket ticket) {
  if (in_group_) return ticket;  // end_group records the group's event, once its collectives are launched
  ZB_CUDA_CHECK(cudaEventRecord(event_of(ticket), comm_stream_));
  recorded_ = ticket;
  trace_scope_.reset();
  return ticket;
}

CommTicket NcclCommunicator::all_reduce_sum(Tensor& data) {
  check_tensor(data);
  const ncclDataType_t type = nccl_type(data.dtype);
  const CommTicket ticket = start_collective("all_reduce", double(data.bytes()));
  ZB_NCCL_CHECK(ncclAllReduce(data.data, data.data, as_count(data.numel()), type, ncclSum, comm_, comm_stream_));
  return finish_collective(ticket);
}

CommTicket NcclCommunicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  check_tensor(in);
  // NCCL's in-place reduce-scatter is exactly the aliasing the interface allows (out is rank's slice of
  // in), so both cases are one call.
  check_reduce_scatter(in, out, rank_, size_);
  const ncclDataType_t type = nccl_type(in.dtype);
  const CommTicket ticket = start_collective("reduce_scatter", double(in.bytes()));
  ZB_NCCL_CHECK(ncclReduceScatter(in.data, out.data, as_count(out.numel()), type, ncclSum, comm_, comm_stream_));
  return finish_collective(ticket);
}

CommTicket NcclCommunicator::all_gather(const Tensor& in, Tensor& out) {
  check_tensor(in);
  check_all_gather(in, out, rank_, size_);  // in place when in is rank's slice of out, as NCCL defines it
  const ncclDataType_t type = nccl_type(in.dtype);
  const CommTicket ticket = start_collective("all_gather", double(out.bytes()));
  ZB_NCCL_CHECK(ncclAllGather(in.data, out.data, as_count(in.numel()), type, comm_, comm_stream_));
  return finish_collective(ticket);
}

CommTicket NcclCommunicator::broadcast(Tensor& data, int root) {
  check_tensor(data);
  check_root(root, size_);
  const ncclDataType_t type = nccl_type(data.dtype);
  const CommTicket ticket = start_collective("broadcast", double(data.bytes()));
  ZB_NCCL_CHECK(ncclBroadcast(data.data, data.data, as_count(data.numel()), type, root, comm_, comm_stream_));
  return finish_collective(ticket);
}

void NcclCommunicator::check_waitable(CommTicket ticket) const {
  ZB_CHECK(ticket >= 0 && ticket <= recorded_, "ticket ", ticket, " cannot be waited on (latest recorded ",
           recorded_, in_group_ ? ", inside a group: call end_group first)" : ")");
}

void NcclCommunicator::wait(CommTicket ticket) {
  check_waitable(ticket);
  if (ticket == 0) return;  // "nothing issued yet": there is nothing to wait for
  ZB_CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, event_of(ticket), 0));
}

CommTicket NcclCommunicator::copy(const Tensor& src, Tensor& dst) {
  ZB_CHECK(!in_group_, "NcclCommunicator::copy inside a group");
  for (const Tensor* t : {&src, static_cast<const Tensor*>(&dst)}) {
    ZB_CHECK(t->device.is_cpu() || t->device == Device::cuda(cuda_device_), "NcclCommunicator on cuda:",
             cuda_device_, " cannot copy ", t->describe());
  }
  ZB_CHECK(src.bytes() == dst.bytes(), "copy of ", src.describe(), " into ", dst.describe());
  TimedCopy timed;
  if (idle_copy_events_.empty()) {
    ZB_CUDA_CHECK(cudaEventCreate(&timed.start));
    ZB_CUDA_CHECK(cudaEventCreate(&timed.end));
  } else {
    timed = idle_copy_events_.back();
    idle_copy_events_.pop_back();
  }
  timed.to_host = dst.device.is_cpu();
  timed.bytes = double(src.bytes());
  // Queued as a collective is, and traced as one (its launch); the device's record of the copy is the work.
  const CommTicket ticket = start_collective("copy", timed.bytes);
  ZB_CUDA_CHECK(cudaEventRecord(timed.start, comm_stream_));
  ZB_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDefault, comm_stream_));
  ZB_CUDA_CHECK(cudaEventRecord(timed.end, comm_stream_));
  copies_in_flight_.push_back(timed);
  return finish_collective(ticket);
}

void NcclCommunicator::host_wait(CommTicket ticket) {
  check_waitable(ticket);
  if (ticket == 0) return;
  TraceScope waiting(TraceCategory::wait, "wait_for_communication");
  ZB_CUDA_CHECK(cudaEventSynchronize(event_of(ticket)));
}

namespace {
// cudaLaunchHostFunc's entry: runs the callback it was given and frees it.
void CUDART_CB run_host_callback(void* callback) {
  std::unique_ptr<std::function<void()>> done(static_cast<std::function<void()>*>(callback));
  (*done)();
}
}  // namespace

void NcclCommunicator::after_issued(std::function<void()> done) {
  ZB_CHECK(!in_group_, "NcclCommunicator::after_issued inside a group");
  auto callback = std::make_unique<std::function<void()>>(std::move(done));
  ZB_CUDA_CHECK(cudaLaunchHostFunc(comm_stream_, run_host_callback, callback.get()));
  callback.release();  // the stream owns it now; run_host_callback frees it
}

CopyTimes NcclCommunicator::take_copy_times() {
  CopyTimes times;
  std::vector<TimedCopy> unfinished;
  for (TimedCopy& copy : copies_in_flight_) {
    if (cudaEventQuery(copy.end) != cudaSuccess) {
      cudaGetLastError();  // cudaErrorNotReady is not an error to report later
      unfinished.push_back(copy);
      continue;
    }
    float ms = 0;
    ZB_CUDA_CHECK(cudaEventElapsedTime(&ms, copy.start, copy.end));
    (copy.to_host ? times.to_host_ms : times.to_device_ms) += ms;
    (copy.to_host ? times.to_host_bytes : times.to_device_bytes) += copy.bytes;
    idle_copy_events_.push_back(copy);
  }
  copies_in_flight_ = std::move(unfinished);
  return times;
}

void NcclCommunicator::begin_group() {
  ZB_CHECK(!in_group_, "NcclCommunicator groups do not nest");
  start_collective("group", 0);  // takes the group's ticket and orders the group after the compute stream
  group_kind_.clear();
  ZB_NCCL_CHECK(ncclGroupStart());
  in_group_ = true;
}

void NcclCommunicator::end_group() {
  ZB_CHECK(in_group_, "end_group without begin_group");
  in_group_ = false;
  ZB_NCCL_CHECK(ncclGroupEnd());
  finish_collective(issued_);
}

double NcclCommunicator::sum_over_ranks(double value) { return mpi_->sum_over_ranks(value); }
bool NcclCommunicator::all_ok(bool ok) { return mpi_->all_ok(ok); }
void NcclCommunicator::barrier() { mpi_->barrier(); }

}  // namespace zb
