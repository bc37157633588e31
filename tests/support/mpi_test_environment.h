// For GoogleTest programs that run under mpirun (linked with mpi_test_main.cc): the job's MpiWorld and an
// MPI communicator over it, alive for the whole test run.
#pragma once

#include "comm/communicator.h"
#include "comm/mpi_world.h"

namespace zb::test {

MpiWorld& mpi_world();
Communicator& mpi_communicator();

}  // namespace zb::test
