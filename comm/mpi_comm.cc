#include "comm/mpi_comm.h"

#include <climits>

#include "comm/collective_checks.h"
#include "comm/mpi_check.h"
#include "core/check.h"

namespace zb {

MpiComm::MpiComm() {
  int initialized = 0;
  ZB_MPI_CHECK(MPI_Initialized(&initialized));
  ZB_CHECK(initialized, "MPI is not running: create the MpiWorld first");
  ZB_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  const int rank_status = MPI_Comm_rank(comm_, &rank_);
  const int size_status = MPI_Comm_size(comm_, &size_);
  if (rank_status != MPI_SUCCESS || size_status != MPI_SUCCESS) {
    MPI_Comm_free(&comm_);  // the destructor does not run for a constructor that throws
    ZB_MPI_CHECK(rank_status);
    ZB_MPI_CHECK(size_status);
  }
}

MpiComm::~MpiComm() {
  // MPI_Comm_free after MPI_Finalize is an error; an MpiComm outliving its MpiWorld just lets it go.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

double MpiComm::sum_over_ranks(double value) const {
  double sum = 0;
  ZB_MPI_CHECK(MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, comm_));
  return sum;
}

bool MpiComm::all_ok(bool ok) const {
  int mine = ok ? 1 : 0;
  int all = 0;
  ZB_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, comm_));
  return all != 0;
}

void MpiComm::barrier() const { ZB_MPI_CHECK(MPI_Barrier(comm_)); }

void MpiComm::broadcast_bytes(void* data, size_t bytes, int root) const {
  check_root(root, size_);
  ZB_MPI_CHECK(MPI_Bcast(data, mpi_count(static_cast<long long>(bytes)), MPI_BYTE, root, comm_));
}

int mpi_count(long long count) {
  ZB_CHECK(count >= 0 && count <= INT_MAX, "MPI counts are ints; ", count, " elements do not fit");
  return static_cast<int>(count);
}

}  // namespace zb
