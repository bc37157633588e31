// LocalCommunicator: the world of one process, for training without MPI (tests, a plain `train` run that
// wants no MPI start-up). Every collective of one rank is the identity; where input and output are different
// buffers it copies, through the function the caller supplies (the backend's copy, on its stream).
#pragma once

#include <functional>
#include <utility>

#include "comm/communicator.h"
#include "core/check.h"

namespace zb {

class LocalCommunicator final : public Communicator {
 public:
  using Copy = std::function<void(const Tensor& src, Tensor& dst)>;
  explicit LocalCommunicator(Copy copy) : copy_(std::move(copy)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe() const override { return "single process"; }

  CommTicket all_reduce_sum(Tensor&) override { return ++tickets_; }
  CommTicket reduce_scatter_sum(const Tensor& in, Tensor& out) override { return move(in, out); }
  CommTicket all_gather(const Tensor& in, Tensor& out) override { return move(in, out); }
  CommTicket broadcast(Tensor&, int) override { return ++tickets_; }
  void wait(CommTicket) override {}
  CommTicket copy(const Tensor& src, Tensor& dst) override { return move(src, dst); }
  void host_wait(CommTicket) override {}
  void after_issued(std::function<void()> done) override { done(); }

  double sum_over_ranks(double value) override { return value; }
  bool all_ok(bool ok) override { return ok; }
  void barrier() override {}

 private:
  CommTicket move(const Tensor& in, Tensor& out) {
    ZB_CHECK(in.numel() == out.numel(), "one rank's collective needs equal sizes: ", in.numel(), " and ", out.numel());
    if (in.data != out.data) copy_(in, out);
    return ++tickets_;
  }

  Copy copy_;
  CommTicket tickets_ = 0;
};

}  // namespace zb
