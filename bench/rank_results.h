// Per-rank results: what each rank of a job measured over the timed steps, gathered on every rank, and what
// a multi-GPU (or multi-node) user reads off them before trusting a run: how far apart the ranks' steps are,
// which rank is the slow one and why (its clock, power and the driver's clock-limiting reasons), and the
// throughput of each host.
//
// In data-parallel training every rank waits for the slowest at each collective, so the ranks' wall-clock
// step times come out nearly equal even when one GPU is slow: the others wait for it inside the collectives,
// and their compute waits for those collectives (the exposed communication). Each rank's busy time, its
// step time less that wait, is what differs; the slow rank is the one with the largest busy time. (With
// offload, the part of the wait spent on the rank's own host update counts as busy: see RankSteps::add.)
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/gpu_telemetry.h"
#include "core/device.h"
#include "engine/trainer.h"

namespace zb {

class RankAgreement;

struct RankResult {
  int rank = 0;
  std::string host;
  int gpu_index = -1;  // the CUDA device ordinal the rank used; -1 on the CPU backend
  std::string gpu_name;
  double step_ms_mean = 0, step_ms_p50 = 0, step_ms_p90 = 0;
  double busy_ms = 0;         // mean per step: the step time less the time compute waited for communication
  double tokens_per_sec = 0;  // this rank's tokens over its step time
  // Mean per step of this rank's CPU optimizer (offload), 0 without one. Ranks sharing a host share its cores
  // and memory bandwidth, so this is where an offload rank's busy time differs from another's.
  double host_update_ms = 0;
  double gpu_peak_gb = 0, host_rss_gb = 0;
  GpuTelemetrySummary telemetry;
};

// The timed steps of one rank, as RankResult counts them.
struct RankSteps {
  std::vector<double> step_ms;
  double busy_ms_total = 0;    // sum over the steps of step time less exposed communication
  double tokens_per_step = 0;  // this rank's
  double host_update_ms_total = 0;

  void add(const StepStats& step, int world) {
    step_ms.push_back(step.seconds * 1e3);
    host_update_ms_total += step.offload.cpu_ms;
    // With offload, the compute also waits for this rank's own host update (the new weights come up behind
    // it): that wait is the rank's own work, not waiting for the others.
    const double waited_for_others = std::max(0.0, step.comm.exposed_ms - step.offload.update_wait_ms);
    busy_ms_total += step.seconds * 1e3 - waited_for_others;
    tokens_per_step = double(step.tokens) / world;
  }
};
// Fills the step fields of `result` (mean, p50, p90, busy, tokens/s); no steps leave them 0.
void summarise_steps(const RankSteps& steps, RankResult& result);

// This rank's result: its place (rank, host, the device it used), its steps, its peak device memory and
// resident set in bytes, and what its GPU's telemetry saw.
RankResult own_rank_result(int rank, const std::string& host, Device device, const RankSteps& steps,
                           double device_peak_bytes, double resident_bytes, const GpuTelemetry& telemetry);

// Every rank's result, in rank order, on every rank (collective).
std::vector<RankResult> gather_rank_results(const RankAgreement& agreement, const RankResult& mine);

// A rank's result as the JSON object of a record's per_rank array, and back (gather_rank_results moves them
// so). Absent telemetry is null.
nlohmann::ordered_json to_json(const RankResult& result);
RankResult rank_result_from_json(const nlohmann::ordered_json& json);

struct NodeThroughput {
  std::string host;
  std::vector<int> ranks;
  double tokens_per_sec = 0;  // the sum of its ranks'
};
// The ranks grouped by host, hosts in the order of their first rank.
std::vector<NodeThroughput> node_throughputs(const std::vector<RankResult>& ranks);

constexpr double kRankSpreadFlagPct = 5.0;  // above this, a run's ranks are flagged as inconsistent

struct RankSpread {
  double step_spread_pct = 0;  // (slowest - fastest) / mean of the ranks' mean step times, in percent
  double busy_spread_pct = 0;  // the same of their busy times
  int slowest_rank = 0;        // by busy time (see the top of this file), or step time where that differs more
  int fastest_rank = 0;
  bool flagged = false;  // either spread above kRankSpreadFlagPct
  // When flagged: "rank 3 is 7.1% slower than rank 0: SM clock 1,410 MHz against 1,590, power cap (96% of
  // samples)", led by "host update 381 ms against 358" where the ranks run a CPU optimizer; else empty.
  std::string note;
};
// Of one or more ranks (one rank: no spread).
RankSpread rank_spread(const std::vector<RankResult>& ranks);

// This process's resident set (VmRSS), in bytes; 0 where /proc cannot be read.
double resident_set_bytes();

// A table of the ranks (one line each: host, GPU, step times, busy time, tokens/s, memory, clock, power, clock
// limits), then the spread and each host's throughput, and the note when flagged.
std::string format_ranks(const std::vector<RankResult>& ranks);

}  // namespace zb
