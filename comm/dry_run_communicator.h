// DryRunCommunicator: rank `rank` of a world of `size` ranks whose collectives are issued and never run: each
// returns a ticket at once without touching its tensors (checked for the sizes the collective needs), and the
// host agreements see this rank alone. With a DryRunBackend it lets the engine's schedule run as on that world
// without the ranks (engine/memory_plan.h).
#pragma once

#include <functional>
#include <utility>

#include "comm/communicator.h"
#include "core/check.h"
#include "core/strings.h"

namespace zb {

class DryRunCommunicator final : public Communicator {
 public:
  DryRunCommunicator(int rank, int size) : rank_(rank), size_(size) {
    ZB_CHECK(size >= 1 && rank >= 0 && rank < size, "rank ", rank, " of ", size, " ranks");
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return cat("dry run, ", size_, " ranks"); }

  CommTicket all_reduce_sum(Tensor&) override { return ++tickets_; }
  CommTicket reduce_scatter_sum(const Tensor& in, Tensor& out) override { return sized(in, out.numel() * size_); }
  CommTicket all_gather(const Tensor& in, Tensor& out) override { return sized(out, in.numel() * size_); }
  CommTicket broadcast(Tensor&, int) override { return ++tickets_; }
  void wait(CommTicket) override {}
  CommTicket copy(const Tensor& src, Tensor& dst) override { return sized(src, dst.numel()); }
  void host_wait(CommTicket) override {}
  void after_issued(std::function<void()> done) override { done(); }

  double sum_over_ranks(double value) override { return value; }
  bool all_ok(bool ok) override { return ok; }
  void barrier() override {}

 private:
  CommTicket sized(const Tensor& whole, int64_t expected) {
    ZB_CHECK(whole.numel() == expected, "a collective of ", size_, " ranks needs ", expected, " elements, not ",
             whole.numel());
    return ++tickets_;
  }

  int rank_, size_;
  CommTicket tickets_ = 0;
};

}  // namespace zb
