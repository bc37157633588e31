// CheckedCommunicator (--check-collectives): the rule every rank of a job must follow, checked. NCCL and MPI
// pair collectives by their order alone, so every rank must issue the same collectives (kind, the unit they
// are for, bytes) in the same order; a rank that skips one, or issues two units in another order, makes the
// others sum the wrong buffers or wait forever. This decorator forwards every call to the communicator it
// wraps and records each collective it issues with the unit the engine names (Communicator::set_subject);
// at the end of each step the ranks compare a hash of their records, and where the hashes differ they compare
// the records themselves and every rank throws an Error naming the step and the first collective that
// differs, with what each rank issued there. A debugging aid: it costs one small host exchange a step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/rank_agreement.h"

namespace zb {

struct IssuedCollective {
  std::string kind;  // "all_reduce", "reduce_scatter", "all_gather", "broadcast"
  int64_t subject = -1;
  size_t bytes = 0;
  bool operator==(const IssuedCollective&) const = default;
  std::string describe() const;  // "all_gather of unit 3, 4096 bytes"
};

// The first position where the ranks' records differ, and what each rank issued there ("nothing" past the end
// of a shorter record); nullopt where all agree. Exposed for tests.
struct CollectiveMismatch {
  size_t index = 0;
  std::vector<std::string> issued;  // one a rank, in rank order
};
std::optional<CollectiveMismatch> first_mismatch(const std::vector<std::vector<IssuedCollective>>& records);

class CheckedCommunicator final : public Communicator {
 public:
  // Creates its own RankAgreement: collective, as construction of one is (MPI must be running).
  explicit CheckedCommunicator(Communicator& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string describe() const override { return inner_.describe() + ", collectives checked"; }
  void* stream() const override { return inner_.stream(); }
  CommTicket all_reduce_sum(Tensor& data) override;
  CommTicket reduce_scatter_sum(const Tensor& in, Tensor& out) override;
  CommTicket all_gather(const Tensor& in, Tensor& out) override;
  CommTicket broadcast(Tensor& data, int root) override;
  void wait(CommTicket ticket) override { inner_.wait(ticket); }
  CommTicket copy(const Tensor& src, Tensor& dst) override { return inner_.copy(src, dst); }
  void host_wait(CommTicket ticket) override { inner_.host_wait(ticket); }
  void after_issued(std::function<void()> done) override { inner_.after_issued(std::move(done)); }
  CopyTimes take_copy_times() override { return inner_.take_copy_times(); }
  void begin_group() override { inner_.begin_group(); }
  void end_group() override { inner_.end_group(); }
  double sum_over_ranks(double value) override { return inner_.sum_over_ranks(value); }
  bool all_ok(bool ok) override { return inner_.all_ok(ok); }
  void barrier() override { inner_.barrier(); }

  // Collective: every rank calls it once a step (`step` 1-based), at the same point of the step. Compares the
  // records since the last call and starts new ones; throws Error on every rank where they differ.
  void end_step(int64_t step);

 private:
  void record(const char* kind, size_t bytes);

  Communicator& inner_;
  RankAgreement agreement_;
  std::vector<IssuedCollective> issued_;
};

}  // namespace zb
