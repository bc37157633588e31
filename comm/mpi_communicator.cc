#include "comm/mpi_communicator.h"

#include <cstring>
#include <vector>

#include "comm/collective_checks.h"
#include "comm/mpi_check.h"
#include "comm/mpi_comm.h"
#include "comm/mpi_world.h"
#include "core/check.h"
#include "core/trace.h"

namespace zb {
namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    default: break;
  }
  throw Error(cat("MpiCommunicator: dtype ", dtype_name(dtype), " is not supported (f32 and f64 are)"));
}

void check_host(const Tensor& tensor) {
  ZB_CHECK(tensor.device.is_cpu(), "MpiCommunicator works on host tensors, not ", tensor.describe());
}

// "Open MPI v4.1.4, package: Debian OpenMPI, ..." -> "Open MPI 4.1.4": what describe() shows.
std::string short_library_name(const std::string& version_line) {
  std::string name = version_line.substr(0, version_line.find(','));
  const size_t v = name.find(" v");
  if (v != std::string::npos && v + 2 < name.size() && name[v + 2] >= '0' && name[v + 2] <= '9') name.erase(v + 1, 1);
  return name;
}

}  // namespace

MpiCommunicator::MpiCommunicator(const MpiWorld& world)
    : comm_(std::make_unique<MpiComm>()), library_(short_library_name(world.mpi_version())) {}

MpiCommunicator::~MpiCommunicator() = default;

int MpiCommunicator::rank() const { return comm_->rank(); }
int MpiCommunicator::size() const { return comm_->size(); }

std::string MpiCommunicator::describe() const {
  return cat("MPI (", library_, "), ", size(), size() == 1 ? " rank" : " ranks");
}

CommTicket MpiCommunicator::all_reduce_sum(Tensor& data) {
  TraceScope scope(TraceCategory::collective, "all_reduce", 0, double(data.bytes()));
  check_host(data);
  const MPI_Datatype type = mpi_type(data.dtype);
  const int count = mpi_count(data.numel());
  // The root reduces in place; the others' receive buffer is ignored. The broadcast then hands the root's
  // bits to everyone.
  const void* send = rank() == 0 ? MPI_IN_PLACE : data.data;
  ZB_MPI_CHECK(MPI_Reduce(send, data.data, count, type, MPI_SUM, 0, comm_->get()));
  ZB_MPI_CHECK(MPI_Bcast(data.data, count, type, 0, comm_->get()));
  return ++issued_;
}

CommTicket MpiCommunicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  TraceScope scope(TraceCategory::collective, "reduce_scatter", 0, double(in.bytes()));
  check_host(in);
  const bool in_place = check_reduce_scatter(in, out, rank(), size());
  const MPI_Datatype type = mpi_type(in.dtype);
  const int count = mpi_count(out.numel());
  if (!in_place) {
    ZB_MPI_CHECK(MPI_Reduce_scatter_block(in.data, out.data, count, type, MPI_SUM, comm_->get()));
    return ++issued_;
  }
  // MPI_IN_PLACE would leave the result at the start of `in` (rank 0's slice), overwriting what the caller
  // may still need there; receiving into a temporary changes nothing but `out`.
  std::vector<char> result(out.bytes());
  ZB_MPI_CHECK(MPI_Reduce_scatter_block(in.data, result.data(), count, type, MPI_SUM, comm_->get()));
  if (!result.empty()) std::memcpy(out.data, result.data(), result.size());
  return ++issued_;
}

CommTicket MpiCommunicator::all_gather(const Tensor& in, Tensor& out) {
  TraceScope scope(TraceCategory::collective, "all_gather", 0, double(out.bytes()));
  check_host(in);
  const bool in_place = check_all_gather(in, out, rank(), size());
  const MPI_Datatype type = mpi_type(in.dtype);
  const int count = mpi_count(in.numel());
  // In place, MPI takes this rank's contribution from its slice of `out`, which is where `in` already is.
  if (in_place) {
    ZB_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.data, count, type, comm_->get()));
  } else {
    ZB_MPI_CHECK(MPI_Allgather(in.data, count, type, out.data, count, type, comm_->get()));
  }
  return ++issued_;
}

CommTicket MpiCommunicator::broadcast(Tensor& data, int root) {
  TraceScope scope(TraceCategory::collective, "broadcast", 0, double(data.bytes()));
  check_host(data);
  check_root(root, size());
  ZB_MPI_CHECK(MPI_Bcast(data.data, mpi_count(data.numel()), mpi_type(data.dtype), root, comm_->get()));
  return ++issued_;
}

CommTicket MpiCommunicator::copy(const Tensor& src, Tensor& dst) {
  TraceScope scope(TraceCategory::copy, "copy", 0, double(src.bytes()));
  check_host(src);
  check_host(dst);
  ZB_CHECK(src.bytes() == dst.bytes(), "copy of ", src.describe(), " into ", dst.describe());
  if (src.data != dst.data) std::memmove(dst.data, src.data, src.bytes());
  return ++issued_;
}

void MpiCommunicator::wait(CommTicket ticket) {
  ZB_CHECK(ticket >= 0 && ticket <= issued_, "ticket ", ticket, " was not issued (last is ", issued_, ")");
}

double MpiCommunicator::sum_over_ranks(double value) { return comm_->sum_over_ranks(value); }
bool MpiCommunicator::all_ok(bool ok) { return comm_->all_ok(ok); }
void MpiCommunicator::barrier() { comm_->barrier(); }

}  // namespace zb
