// MpiWorld: the job's layout as every rank sees it. (The tests' main is support/mpi_test_main.cc.)
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/mpi_communicator.h"
#include "comm/mpi_world.h"

namespace zb::test {
namespace {

TEST(MpiWorld, DescribesTheJob) {
  const MpiWorld world;  // MPI is already running: this one only reads the job's layout
  EXPECT_GE(world.rank(), 0);
  EXPECT_LT(world.rank(), world.size());
  EXPECT_GE(world.local_rank(), 0);
  EXPECT_LT(world.local_rank(), world.local_size());
  EXPECT_LE(world.local_size(), world.size());
  EXPECT_FALSE(world.host_name().empty());
  EXPECT_FALSE(world.mpi_version().empty());
  EXPECT_EQ(world.mpi_version().find('\n'), std::string::npos);
  EXPECT_NE(world.mpi_version().back(), ' ');

  // Every rank counts itself once in its host's group: the local sizes, summed over each host's local
  // rank 0, make up the world.
  MpiCommunicator comm(world);
  EXPECT_EQ(comm.sum_over_ranks(world.local_rank() == 0 ? world.local_size() : 0), world.size());
  EXPECT_EQ(comm.sum_over_ranks(world.rank()), world.size() * (world.size() - 1) / 2.0);
}

}  // namespace
}  // namespace zb::test

