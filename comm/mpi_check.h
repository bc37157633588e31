// ZB_MPI_CHECK: throws zb::Error naming a failed MPI call, its error string and the source location.
// Internal to comm/ (it brings in mpi.h); the public headers stay free of MPI types.
//
// MPI's default error handler aborts the job before a call can return an error; the check matters where a
// communicator returns errors instead, and it keeps every call's status looked at.
#pragma once

#include <mpi.h>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

[[noreturn]] inline void throw_mpi_error(int status, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(status, text, &length) != MPI_SUCCESS) length = 0;
  throw Error(cat(file, ":", line, ": ", call, " failed: ", std::string(text, static_cast<size_t>(length))));
}

}  // namespace zb

#define ZB_MPI_CHECK(call)                                                                         \
  do {                                                                                             \
    const int zb_mpi_status_ = (call);                                                             \
    if (zb_mpi_status_ != MPI_SUCCESS) ::zb::throw_mpi_error(zb_mpi_status_, #call, __FILE__, __LINE__); \
  } while (0)
