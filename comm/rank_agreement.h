// RankAgreement: how the ranks of a job agree on results each one computed alone (host-side, through MPI,
// blocking). The benchmarks use it so that a configuration that failed on any rank is recorded as failed on
// every rank, with the failing rank's message, and so that a report states the worst rank's numbers.
// Construction is collective (a private MPI communicator): every rank creates it in the same order.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zb {

class MpiComm;

class RankAgreement {
 public:
  RankAgreement();  // MPI must be running (an MpiWorld exists)
  ~RankAgreement();
  RankAgreement(const RankAgreement&) = delete;
  RankAgreement& operator=(const RankAgreement&) = delete;

  int rank() const;
  int size() const;

  struct Outcome {
    int status = 0;       // the highest status any rank passed
    std::string message;  // that of the lowest rank with it
    int rank = 0;         // which rank that was
  };
  // Every rank passes its own status (0 for success, higher for worse) and message. With a deadline, a rank
  // that the others have not joined within that many seconds gets nullopt instead of waiting on: they are
  // likely stuck in a collective of the work it failed out of (the caller then ends the job).
  std::optional<Outcome> worst(int status, const std::string& message, std::optional<double> deadline_s) const;
  Outcome worst(int status, const std::string& message) const { return *worst(status, message, std::nullopt); }
  double max(double value) const;
  double sum(double value) const;
  // Every rank's text, in rank order, on every rank.
  std::vector<std::string> all_gather(const std::string& text) const;

 private:
  std::unique_ptr<MpiComm> comm_;
};

}  // namespace zb
