// The main of the tests that run under mpirun: MPI starts before GoogleTest and ends after it, and the exit
// code is nonzero on every rank when a test failed on any rank (mpirun reports the first nonzero one). Rank 0
// prints GoogleTest's usual report; the other ranks print only their failures, tagged with their rank.
// Runs under mpirun with any number of ranks, or alone (a job of one rank).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "comm/mpi_communicator.h"
#include "support/mpi_test_environment.h"

namespace zb::test {
namespace {

class FailurePrinter final : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }

 private:
  int rank_;
};

// Set by main for the duration of the run.
MpiWorld* g_world = nullptr;
Communicator* g_comm = nullptr;

}  // namespace

MpiWorld& mpi_world() { return *g_world; }
Communicator& mpi_communicator() { return *g_comm; }

}  // namespace zb::test

int main(int argc, char** argv) {
  zb::MpiWorld world;
  zb::MpiCommunicator comm(world);
  zb::test::g_world = &world;
  zb::test::g_comm = &comm;
  ::testing::InitGoogleTest(&argc, argv);
  if (world.rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new zb::test::FailurePrinter(world.rank()));  // GoogleTest owns and deletes it
  }
  const bool passed = RUN_ALL_TESTS() == 0;
  const bool all_passed = comm.all_ok(passed);
  if (world.rank() == 0 && passed && !all_passed) std::fprintf(stderr, "tests failed on another rank\n");
  return all_passed ? 0 : 1;
}
