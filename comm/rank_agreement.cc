#include "comm/rank_agreement.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "comm/mpi_check.h"
#include "comm/mpi_comm.h"

namespace zb {

RankAgreement::RankAgreement() : comm_(std::make_unique<MpiComm>()) {}
RankAgreement::~RankAgreement() = default;

int RankAgreement::rank() const {
  return comm_->rank();
}
int RankAgreement::size() const {
  return comm_->size();
}

std::optional<RankAgreement::Outcome> RankAgreement::worst(int status, const std::string& message,
                                                           std::optional<double> deadline_s) const {
  Outcome out;
  if (deadline_s) {
    // Non-blocking, so that a rank that is here alone can give up: every other rank arrives soon or never.
    MPI_Request request = MPI_REQUEST_NULL;
    ZB_MPI_CHECK(MPI_Iallreduce(&status, &out.status, 1, MPI_INT, MPI_MAX, comm_->get(), &request));
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(*deadline_s);
    for (int done = 0;;) {
      ZB_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (done) break;
      if (std::chrono::steady_clock::now() > give_up) return std::nullopt;  // (the job is ended next)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } else {
    ZB_MPI_CHECK(MPI_Allreduce(&status, &out.status, 1, MPI_INT, MPI_MAX, comm_->get()));
  }
  // The lowest rank holding the worst status speaks for all.
  int candidate = status == out.status ? comm_->rank() : comm_->size();
  ZB_MPI_CHECK(MPI_Allreduce(&candidate, &out.rank, 1, MPI_INT, MPI_MIN, comm_->get()));
  unsigned long long length = out.rank == comm_->rank() ? message.size() : 0;
  comm_->broadcast_bytes(&length, sizeof length, out.rank);
  std::vector<char> text(length);
  if (out.rank == comm_->rank()) std::copy(message.begin(), message.end(), text.begin());
  if (length > 0) comm_->broadcast_bytes(text.data(), length, out.rank);
  out.message.assign(text.begin(), text.end());
  return out;
}

double RankAgreement::max(double value) const {
  double out = 0;
  ZB_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm_->get()));
  return out;
}

double RankAgreement::sum(double value) const {
  return comm_->sum_over_ranks(value);
}

std::vector<std::string> RankAgreement::all_gather(const std::string& text) const {
  const int ranks = comm_->size();
  int length = mpi_count((long long)text.size());
  std::vector<int> lengths(static_cast<size_t>(ranks)), offsets(static_cast<size_t>(ranks));
  ZB_MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_->get()));
  long long total = 0;
  for (int r = 0; r < ranks; ++r) {
    offsets[size_t(r)] = mpi_count(total);
    total += lengths[size_t(r)];
  }
  std::vector<char> all(size_t(std::max(total, 1LL)));
  ZB_MPI_CHECK(MPI_Allgatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                              comm_->get()));
  std::vector<std::string> out;
  for (int r = 0; r < ranks; ++r) out.emplace_back(all.data() + offsets[size_t(r)], size_t(lengths[size_t(r)]));
  return out;
}

}  // namespace zb
