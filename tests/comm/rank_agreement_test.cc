// RankAgreement under MPI jobs of 1 to 4 ranks: every rank learns the worst status any rank passed and the
// message of the lowest rank that passed it (so a failure is reported the same on every rank, whichever failed),
// the maximum and sum of a number, and every rank's text.
#include <gtest/gtest.h>

#include <string>

#include "comm/rank_agreement.h"
#include "core/strings.h"

namespace zb::test {
namespace {

TEST(RankAgreement, EveryRankGetsTheWorstStatusAndTheLowestSuchRanksMessage) {
  RankAgreement agreement;
  const int rank = agreement.rank(), ranks = agreement.size();
  // The last rank and, with 3 or more, rank 1 report the worst status (3); the lowest of them speaks.
  const bool worst = rank == ranks - 1 || (ranks >= 3 && rank == 1);
  const int expected_rank = ranks >= 3 ? 1 : ranks - 1;
  const RankAgreement::Outcome outcome =
      agreement.worst(worst ? 3 : rank % 2, cat("message of rank ", rank, std::string(rank * 100, '.')));
  EXPECT_EQ(outcome.status, 3);
  EXPECT_EQ(outcome.rank, expected_rank);
  EXPECT_EQ(outcome.message, cat("message of rank ", expected_rank, std::string(expected_rank * 100, '.')));

  const RankAgreement::Outcome all_ok = agreement.worst(0, rank == 0 ? "first" : "");
  EXPECT_EQ(all_ok.status, 0);
  EXPECT_EQ(all_ok.rank, 0) << "with everyone equal, rank 0 speaks";
  EXPECT_EQ(all_ok.message, "first");
}

TEST(RankAgreement, WithinItsDeadlineItAgreesAsWithout) {
  RankAgreement agreement;
  const auto outcome = agreement.worst(agreement.rank() == 0 ? 2 : 0, "late", 60.0);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->status, 2);
  EXPECT_EQ(outcome->rank, 0);
}

TEST(RankAgreement, MaximumAndSumOverRanks) {
  RankAgreement agreement;
  const int rank = agreement.rank(), ranks = agreement.size();
  EXPECT_DOUBLE_EQ(agreement.max(rank == 0 ? 7.5 : -double(rank)), 7.5);
  EXPECT_DOUBLE_EQ(agreement.max(double(rank)), double(ranks - 1));
  EXPECT_DOUBLE_EQ(agreement.sum(rank + 1.0), ranks * (ranks + 1) / 2.0);
}

TEST(RankAgreement, AllGatherGivesEveryRankEveryRanksTextInRankOrder) {
  RankAgreement agreement;
  const int rank = agreement.rank(), ranks = agreement.size();
  // Lengths differ by rank, and rank 1's is empty: offsets must follow each rank's own length.
  auto text_of = [](int r) { return r == 1 ? std::string() : cat("rank ", r, std::string(size_t(r) * 37, 'x')); };
  const std::vector<std::string> all = agreement.all_gather(text_of(rank));
  ASSERT_EQ(all.size(), size_t(ranks));
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(all[size_t(r)], text_of(r)) << "rank " << r;
}

}  // namespace
}  // namespace zb::test
