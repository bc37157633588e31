#include "comm/mpi_world.h"

#include <cstring>

#include <cstdlib>

#include "comm/mpi_check.h"
#include "core/check.h"

namespace zb {
namespace {

std::string first_line_trimmed(const std::string& text) {
  const std::string line = text.substr(0, text.find('\n'));
  const char* space = " \t\r\f\v";
  const size_t begin = line.find_first_not_of(space);
  if (begin == std::string::npos) return {};
  return line.substr(begin, line.find_last_not_of(space) - begin + 1);
}

bool mpi_running() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

}  // namespace

MpiWorld::Session::Session() {
  int initialized = 0;
  int finalized = 0;
  ZB_MPI_CHECK(MPI_Initialized(&initialized));
  ZB_MPI_CHECK(MPI_Finalized(&finalized));
  // MPI cannot start twice in one process: a second MpiWorld after the first one finalised is a bug.
  ZB_CHECK(!finalized, "MPI was already finalised; keep one MpiWorld for the whole program");
  if (initialized) return;  // someone else owns MPI; leave its lifetime to them
  int provided = 0;
  ZB_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
  owns_ = true;
  ZB_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI provides thread level ", provided, ", FUNNELED is needed");
}

MpiWorld::Session::~Session() {
  if (owns_) MPI_Finalize();
}

MpiWorld::MpiWorld() {
  ZB_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  ZB_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));

  MPI_Comm local = MPI_COMM_NULL;
  ZB_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  const int rank_status = MPI_Comm_rank(local, &local_rank_);
  const int size_status = MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);  // freed before the checks, so that a failure does not leak it
  ZB_MPI_CHECK(rank_status);
  ZB_MPI_CHECK(size_status);

  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int name_length = 0;
  ZB_MPI_CHECK(MPI_Get_processor_name(name, &name_length));
  host_name_.assign(name, static_cast<size_t>(name_length));

  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int version_length = 0;
  ZB_MPI_CHECK(MPI_Get_library_version(version, &version_length));
  // (Open MPI counts the terminating NUL in the length.)
  mpi_version_ = first_line_trimmed(std::string(version, ::strnlen(version, static_cast<size_t>(version_length))));
}

MpiWorld::~MpiWorld() = default;

void abort_job(int code) {
  if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this covers a process where MPI is not running
}

}  // namespace zb
