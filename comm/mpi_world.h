// MpiWorld: the process's place in the MPI job, and the owner of MPI's lifetime. Construct one at the top
// of main, before anything that communicates; it initialises MPI (thread level FUNNELED: only the thread
// that initialised MPI calls it) unless MPI is already running, and finalises it only if it initialised it.
// Without mpirun the process is an Open MPI singleton: a job of one rank.
//
// mpi.h stays out of this header: the node-local numbers are computed once in the constructor, so no MPI
// handle needs to outlive it.
#pragma once

#include <string>

namespace zb {

class MpiWorld {
 public:
  MpiWorld();
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Among the ranks that share this host's memory (MPI_COMM_TYPE_SHARED): which GPU to take.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::string& host_name() const { return host_name_; }
  // The first line of MPI_Get_library_version, trimmed: "Open MPI v4.1.4, package: ...".
  const std::string& mpi_version() const { return mpi_version_; }

 private:
  // Finalises MPI on destruction if it initialised it. A member of its own so that MPI is finalised even
  // when the rest of MpiWorld's constructor throws.
  class Session {
   public:
    Session();
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

   private:
    bool owns_ = false;
  };

  Session session_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string host_name_;
  std::string mpi_version_;
};

// Ends every process of the job with `code` (MPI_Abort): for a fatal error on one rank, where the others
// would otherwise wait forever in their next collective. Without MPI running, exits this process.
[[noreturn]] void abort_job(int code);

}  // namespace zb
