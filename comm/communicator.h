// Communicator: the collectives of data-parallel training over the ranks of one job. Two implementations:
// NCCL for device buffers (asynchronous, on a communication stream of its own) and MPI for host buffers
// (the CPU backend; synchronous). The engine writes its schedule once against this interface.
//
// Ordering (NCCL): a collective starts only after all work queued so far on the compute stream it was made
// with, and runs on the communication stream, so it overlaps compute queued later. Each returns a ticket;
// wait(ticket) makes compute work queued afterwards wait for that collective (and for those issued before
// it). Nothing blocks the host. With MPI every call completes before it returns and wait() is free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/tensor.h"

namespace zb {

using CommTicket = int64_t;

// Device time and bytes of the host<->device copies since they were last taken.
struct CopyTimes {
  double to_host_ms = 0, to_device_ms = 0;
  double to_host_bytes = 0, to_device_bytes = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string describe() const = 0;  // e.g. "NCCL 2.27.3, 2 ranks" or "MPI (Open MPI 4.1.4), 3 ranks"
  // The device queue the collectives run on (a cudaStream_t for NCCL), for a trace to name; nullptr for MPI.
  virtual void* stream() const { return nullptr; }

  // Tensors are contiguous, of dtype f32, bf16 or f64, on the implementation's device kind.
  // data = the sum over ranks of data (every rank gets identical bits).
  virtual CommTicket all_reduce_sum(Tensor& data) = 0;
  // out = rank r's slice of the sum over ranks of in: in.numel() == size() * out.numel(); rank r receives
  // elements [r * out.numel(), (r + 1) * out.numel()). out may alias that slice of in.
  virtual CommTicket reduce_scatter_sum(const Tensor& in, Tensor& out) = 0;
  // out = the concatenation of every rank's in, in rank order: out.numel() == size() * in.numel(). in may
  // alias rank r's slice of out.
  virtual CommTicket all_gather(const Tensor& in, Tensor& out) = 0;
  virtual CommTicket broadcast(Tensor& data, int root) = 0;
  // Compute work queued after this call waits for the collective `ticket` (and every earlier one).
  virtual void wait(CommTicket ticket) = 0;
  // A copy between host (pinned) memory and this rank's device, or within either, queued like a collective:
  // after the compute work queued so far and the collectives issued before it, so that the offload
  // strategies' gradients go down and weights come up on the communication stream while compute runs.
  // Returns a ticket as the collectives do. (Synchronous implementations copy at once.)
  virtual CommTicket copy(const Tensor& src, Tensor& dst) = 0;
  // Blocks the host until collective or copy `ticket` (and every earlier one) has finished.
  virtual void host_wait(CommTicket ticket) = 0;
  // Calls `done` on a host thread once every collective and copy issued so far has finished, without
  // blocking the caller: how the host optimizer learns that a gradient has landed in host memory while
  // training goes on. `done` must be quick and must not call CUDA (NCCL runs it as a stream callback).
  // Synchronous implementations call it at once.
  virtual void after_issued(std::function<void()> done) = 0;
  // The copies' device time since the last call (only copies that have finished are counted; synchronous
  // implementations count nothing: their copies are part of the host's time).
  virtual CopyTimes take_copy_times() { return {}; }
  // Several collectives issued between begin_group and end_group go out as one launch (NCCL groups).
  virtual void begin_group() {}
  virtual void end_group() {}

  // Host-side agreement, blocking, through MPI whatever the implementation: the sum of a double over ranks,
  // and whether every rank passed `ok` (how ranks agree that a configuration failed).
  virtual double sum_over_ranks(double value) = 0;
  virtual bool all_ok(bool ok) = 0;
  virtual void barrier() = 0;

  // What the collectives issued from now on are for: a unit's index, or -1 for none (the gradient norm). The
  // collectives themselves do not need it; a CheckedCommunicator records it with each, so that two ranks
  // issuing different units' collectives of equal size in the same place are told apart.
  void set_subject(int64_t unit) { subject_ = unit; }

 protected:
  int64_t subject_ = -1;
};

}  // namespace zb
