// MpiComm: a private duplicate of MPI_COMM_WORLD, freed on destruction, with the host-side agreements
// every Communicator offers (sum of a double, logical AND, barrier). A duplicate gives each communicator
// its own message space, so its traffic never matches another library's on MPI_COMM_WORLD.
//
// Internal to comm/: it brings in mpi.h. The public headers hold it through a pointer to a declared class.
// Construction is collective: every rank must create its MpiComm objects in the same order.
#pragma once

#include <mpi.h>

#include <cstddef>

namespace zb {

class MpiComm {
 public:
  MpiComm();  // MPI must be running (an MpiWorld exists)
  ~MpiComm();
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  double sum_over_ranks(double value) const;
  bool all_ok(bool ok) const;
  void barrier() const;
  // Copies `bytes` bytes at `data` from `root` to every rank.
  void broadcast_bytes(void* data, size_t bytes, int root) const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

// An element count as MPI's int, after checking that it fits.
int mpi_count(long long count);

}  // namespace zb
