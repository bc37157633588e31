// --check-collectives under MPI jobs of 1 to 4 ranks: ranks that issue the same collectives pass; a rank that
// skips one, or issues another unit's in its place, stops every rank at the end of that step with a message
// naming the step, the collective and what each rank issued there. The collectives themselves go to a
// communicator that moves nothing: the check is what is tested, not the sums.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/checked_communicator.h"
#include "core/errors.h"
#include "core/strings.h"

namespace zb::test {
namespace {

// Collectives that return at once and move nothing.
class SilentCommunicator final : public Communicator {
 public:
  explicit SilentCommunicator(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::string describe() const override { return "silent"; }
  CommTicket all_reduce_sum(Tensor&) override { return ++tickets_; }
  CommTicket reduce_scatter_sum(const Tensor&, Tensor&) override { return ++tickets_; }
  CommTicket all_gather(const Tensor&, Tensor&) override { return ++tickets_; }
  CommTicket broadcast(Tensor&, int) override { return ++tickets_; }
  void wait(CommTicket) override {}
  CommTicket copy(const Tensor&, Tensor&) override { return ++tickets_; }
  void host_wait(CommTicket) override {}
  void after_issued(std::function<void()> done) override { done(); }
  double sum_over_ranks(double value) override { return value; }
  bool all_ok(bool ok) override { return ok; }
  void barrier() override {}

 private:
  int size_;
  CommTicket tickets_ = 0;
};

// One step's collectives as the engine issues them: a gradient's reduce-scatter per unit, the norm's all-reduce,
// the new weights' all-gathers. `skip` leaves out the all-gather of that unit; `swap` issues units 1 and 2's
// all-gathers (equal in size) in the other order.
void issue_step(Communicator& comm, int skip = -1, bool swap = false) {
  std::vector<float> whole(1024), shard(1024), norm(1);
  Tensor w(whole.data(), Shape{1024}, DType::f32, Device::cpu()), s(shard.data(), Shape{1024}, DType::f32, Device::cpu());
  Tensor n(norm.data(), Shape{1}, DType::f32, Device::cpu());
  for (int unit = 0; unit < 3; ++unit) {
    comm.set_subject(unit);
    comm.reduce_scatter_sum(w, s);
  }
  comm.set_subject(-1);
  comm.all_reduce_sum(n);
  const std::vector<int> order = swap ? std::vector<int>{0, 2, 1} : std::vector<int>{0, 1, 2};
  for (int unit : order) {
    if (unit == skip) continue;
    comm.set_subject(unit);
    comm.all_gather(s, w);
  }
}

std::string end_step_error(CheckedCommunicator& checked, int64_t step) {
  try {
    checked.end_step(step);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckedCommunicator, RanksThatIssueTheSameCollectivesPass) {
  RankAgreement world;
  SilentCommunicator inner(world.size());
  CheckedCommunicator checked(inner);
  for (int64_t step = 1; step <= 3; ++step) {
    issue_step(checked);
    EXPECT_EQ(end_step_error(checked, step), "") << "step " << step;
  }
}

TEST(CheckedCommunicator, ARankThatSkipsOneIsNamedAtTheFirstDifference) {
  RankAgreement world;
  const int last = world.size() - 1;
  if (last == 0) GTEST_SKIP() << "one rank has no one to differ from";
  SilentCommunicator inner(world.size());
  CheckedCommunicator checked(inner);
  issue_step(checked);
  ASSERT_EQ(end_step_error(checked, 1), "");
  issue_step(checked, world.rank() == last ? 1 : -1);
  // Collectives 1-3 reduce-scatters, 4 the norm, 5-7 the all-gathers: the last rank's 6th is unit 2's.
  const std::string error = end_step_error(checked, 2);
  EXPECT_NE(error.find("--check-collectives: at step 2 the ranks' collective #6 differs"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 0: all_gather of unit 1, 4096 bytes"), std::string::npos) << error;
  EXPECT_NE(error.find(cat("rank ", last, ": all_gather of unit 2, 4096 bytes")), std::string::npos) << error;
  // The next step starts afresh: equal collectives pass again.
  issue_step(checked);
  EXPECT_EQ(end_step_error(checked, 3), "");
}

TEST(CheckedCommunicator, UnitsOfEqualSizeInAnotherOrderAreToldApart) {
  RankAgreement world;
  if (world.size() == 1) GTEST_SKIP() << "one rank has no one to differ from";
  SilentCommunicator inner(world.size());
  CheckedCommunicator checked(inner);
  issue_step(checked, -1, world.rank() == 0);
  const std::string error = end_step_error(checked, 1);
  EXPECT_NE(error.find("collective #6 differs (rank 0: all_gather of unit 2, 4096 bytes; rank 1: all_gather of unit 1"),
            std::string::npos)
      << error;
}

TEST(CheckedCommunicator, FirstMismatchOfRecords) {
  const IssuedCollective a{"all_gather", 1, 8}, b{"all_gather", 2, 8};
  EXPECT_FALSE(first_mismatch({{a, b}, {a, b}}).has_value());
  const auto shorter = first_mismatch({{a, b}, {a}});
  ASSERT_TRUE(shorter.has_value());
  EXPECT_EQ(shorter->index, 1u);
  EXPECT_EQ(shorter->issued, (std::vector<std::string>{"all_gather of unit 2, 8 bytes", "nothing"}));
  const IssuedCollective norm{"all_reduce", -1, 4};
  EXPECT_EQ(norm.describe(), "all_reduce, 4 bytes");
}

}  // namespace
}  // namespace zb::test
