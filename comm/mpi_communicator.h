// MpiCommunicator: the Communicator for host tensors (the CPU backend), over a duplicate of MPI_COMM_WORLD.
// Every call completes before it returns, so tickets only count calls and wait() does nothing.
// Dtypes f32 and f64; any other throws zb::Error naming it.
//
// all_reduce_sum is a reduction to rank 0 followed by a broadcast, not MPI_Allreduce: an allreduce may
// sum in a different order on different ranks (and so round differently), and data-parallel replicas
// drift apart unless every rank gets the same bits.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace zb {

class MpiComm;
class MpiWorld;

class MpiCommunicator final : public Communicator {
 public:
  // Collective: every rank constructs its communicators in the same order.
  explicit MpiCommunicator(const MpiWorld& world);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  std::string describe() const override;  // "MPI (Open MPI 4.1.4), 3 ranks"

  CommTicket all_reduce_sum(Tensor& data) override;
  CommTicket reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  CommTicket all_gather(const Tensor& in, Tensor& out) override;
  CommTicket broadcast(Tensor& data, int root) override;
  void wait(CommTicket ticket) override;
  CommTicket copy(const Tensor& src, Tensor& dst) override;  // host tensors: a memmove
  void host_wait(CommTicket) override {}
  void after_issued(std::function<void()> done) override { done(); }

  double sum_over_ranks(double value) override;
  bool all_ok(bool ok) override;
  void barrier() override;

 private:
  std::unique_ptr<MpiComm> comm_;
  std::string library_;  // "Open MPI 4.1.4"
  CommTicket issued_ = 0;
};

}  // namespace zb
