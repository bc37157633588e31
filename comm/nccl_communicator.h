// NcclCommunicator: the Communicator for device tensors, one GPU per rank. Collectives run on a
// communication stream of its own, ordered after the compute stream's work queued before the call, so
// they overlap the compute queued after it; wait(ticket) orders later compute work after a collective.
// Nothing here blocks the host, apart from construction (NCCL's rendezvous) and the host-side agreements,
// which go through MPI.
//
// Tickets map onto a ring of CUDA events. A ticket older than the ring's length shares its event with a
// later ticket; waiting on it then waits for that later collective too, which is later on the same
// stream: it over-waits, never under-waits.
//
// Neither nccl.h nor the CUDA headers are needed to use it: the streams cross this interface as void*
// (a cudaStream_t), and the handles below are declared, not defined.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/trace.h"

struct ncclComm;
struct CUstream_st;
struct CUevent_st;

namespace zb {

// The NCCL library's version ("2.28.3"), whatever the job; for reports.
std::string nccl_library_version();


class MpiComm;
class MpiWorld;

class NcclCommunicator final : public Communicator {
 public:
  // Collective over all ranks. Makes cuda_device current (and leaves it so); compute_stream (a
  // cudaStream_t; nullptr is the legacy default stream) must belong to that device and outlive this.
  NcclCommunicator(const MpiWorld& world, int cuda_device, void* compute_stream);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override;  // "NCCL 2.28.3, 2 ranks"

  // Dtypes f32, bf16 and f64, on the communicator's device.
  CommTicket all_reduce_sum(Tensor& data) override;
  CommTicket reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  CommTicket all_gather(const Tensor& in, Tensor& out) override;
  CommTicket broadcast(Tensor& data, int root) override;
  void wait(CommTicket ticket) override;
  // Copies (device <-> pinned host, or device to device) on the communication stream; each is timed.
  CommTicket copy(const Tensor& src, Tensor& dst) override;
  void host_wait(CommTicket ticket) override;
  void after_issued(std::function<void()> done) override;
  CopyTimes take_copy_times() override;

  // A group's collectives start after the compute work queued before begin_group (not before each call)
  // and share one ticket, which each of them returns; that ticket can be waited on after end_group.
  void begin_group() override;
  void end_group() override;

  double sum_over_ranks(double value) override;
  bool all_ok(bool ok) override;
  void barrier() override;

  void* comm_stream() const { return comm_stream_; }
  void* stream() const override { return comm_stream_; }
  int nccl_version() const { return nccl_version_; }  // as ncclGetVersion reports it: 22803 for 2.28.3
  int cuda_device() const { return cuda_device_; }

 private:
  static constexpr int kEventRing = 256;

  // Before a collective outside a group: the communication stream waits for the compute stream, and a
  // new ticket is taken. After it: the ticket's event is recorded on the communication stream.
  // Each opens (start) and closes (finish) the collective's slice in a trace, where one is taken: `kind`
  // ("all_gather", ...) and its bytes (the whole buffer's, as NCCL's tests count them). Inside a group the
  // group's slice, open from begin_group to end_group where NCCL launches, takes them.
  CommTicket start_collective(const char* kind, double bytes);
  CommTicket finish_collective(CommTicket ticket);
  CUevent_st* event_of(CommTicket ticket) const;
  void check_tensor(const Tensor& tensor) const;
  void check_waitable(CommTicket ticket) const;  // issued, recorded, and not inside an open group
  void release() noexcept;

  // A copy's timing events, recycled once it has been counted.
  struct TimedCopy {
    CUevent_st* start = nullptr;
    CUevent_st* end = nullptr;
    bool to_host = false;
    double bytes = 0;
  };
  std::vector<TimedCopy> copies_in_flight_, idle_copy_events_;

  std::unique_ptr<MpiComm> mpi_;
  int rank_ = 0;
  int size_ = 1;
  int cuda_device_ = 0;
  int nccl_version_ = 0;
  CUstream_st* compute_stream_ = nullptr;
  CUstream_st* comm_stream_ = nullptr;
  CUevent_st* compute_ready_ = nullptr;  // one event suffices: a stream wait captures its latest record
  CUevent_st* events_[kEventRing] = {};
  ncclComm* comm_ = nullptr;
  CommTicket issued_ = 0;     // the latest ticket handed out
  CommTicket recorded_ = 0;   // the latest ticket whose event is recorded (behind issued_ inside a group)
  bool in_group_ = false;
  std::optional<TraceScope> trace_scope_;  // the open collective's or group's slice
  // The open group's kind, its slice's detail: its collectives' name where they share one ("all_reduce"), else
  // "mixed".
  std::string group_kind_;
};

}  // namespace zb
