// (nlohmann's ordered_json trips GCC 12's -Wmaybe-uninitialized inside the library's header; see bench_record.cc.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "bench/rank_results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "bench/percentile.h"
#include "comm/rank_agreement.h"
#include "core/cuda_devices.h"

namespace zb {

namespace {

nlohmann::ordered_json optional_number(const std::optional<double>& value) {
  return value && std::isfinite(*value) ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

std::optional<double> read_optional(const nlohmann::ordered_json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<double>();
}

// 1410 as "1,410".
std::string thousands(double value) {
  const long long n = std::llround(value);
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

double spread_pct(const std::vector<double>& values) {
  const double mean = std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
  if (!(mean > 0)) return 0;
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  return 100.0 * (*high - *low) / mean;
}

// Why a rank's clock was held down, from its telemetry: the reasons other than idling, with their shares.
std::string limits_text(const GpuTelemetrySummary& t) {
  std::string out;
  for (const ClockLimitReason& reason : t.limit_reasons) {
    if (reason.name == "idle") continue;
    char share[48];
    std::snprintf(share, sizeof share, " (%.0f%% of samples)", 100.0 * reason.share);
    out += (out.empty() ? "" : ", ") + reason.name + share;
  }
  return out;
}

}  // namespace

double resident_set_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      double kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(1 << 20, '\n');
  }
  return 0;
}

void summarise_steps(const RankSteps& steps, RankResult& r) {
  if (steps.step_ms.empty()) return;
  const double n = double(steps.step_ms.size());
  r.step_ms_mean = std::accumulate(steps.step_ms.begin(), steps.step_ms.end(), 0.0) / n;
  r.step_ms_p50 = percentile(steps.step_ms, 0.5);
  r.step_ms_p90 = percentile(steps.step_ms, 0.9);
  r.busy_ms = steps.busy_ms_total / n;
  r.host_update_ms = steps.host_update_ms_total / n;
  r.tokens_per_sec = r.step_ms_mean > 0 ? steps.tokens_per_step / (r.step_ms_mean / 1e3) : 0;
}

RankResult own_rank_result(int rank, const std::string& host, Device device, const RankSteps& steps,
                           double device_peak_bytes, double resident_bytes, const GpuTelemetry& telemetry) {
  RankResult r;
  r.rank = rank;
  r.host = host;
  r.gpu_index = device.is_cuda() ? device.index : -1;
  r.gpu_name = device.is_cuda() ? cuda_device_name(device.index) : "CPU";
  summarise_steps(steps, r);
  r.gpu_peak_gb = device_peak_bytes / 1e9;
  r.host_rss_gb = resident_bytes / 1e9;
  r.telemetry = telemetry.summary();
  return r;
}

nlohmann::ordered_json to_json(const RankResult& r) {
  nlohmann::ordered_json j;
  j["rank"] = r.rank;
  j["host"] = r.host;
  j["gpu_index"] = r.gpu_index;
  j["gpu_name"] = r.gpu_name;
  j["step_ms_mean"] = r.step_ms_mean;
  j["step_ms_p50"] = r.step_ms_p50;
  j["step_ms_p90"] = r.step_ms_p90;
  j["busy_ms"] = r.busy_ms;
  j["tokens_per_sec"] = r.tokens_per_sec;
  j["host_update_ms"] = r.host_update_ms;
  j["gpu_peak_gb"] = r.gpu_peak_gb;
  j["host_rss_gb"] = r.host_rss_gb;
  const GpuTelemetrySummary& t = r.telemetry;
  j["sm_clock_mhz_median"] = optional_number(t.sm_clock_mhz);
  j["power_w_median"] = optional_number(t.power_w);
  j["power_limit_w"] = optional_number(t.power_limit_w);
  nlohmann::ordered_json reasons = nlohmann::ordered_json::object();
  for (const ClockLimitReason& reason : t.limit_reasons) reasons[reason.name] = reason.share;
  j["clock_limit_reasons"] = reasons;  // name: share of the samples that showed it
  j["telemetry_samples"] = t.samples;
  j["telemetry_unavailable"] = t.unavailable;
  return j;
}

RankResult rank_result_from_json(const nlohmann::ordered_json& j) {
  RankResult r;
  r.rank = j.at("rank").get<int>();
  r.host = j.at("host").get<std::string>();
  r.gpu_index = j.at("gpu_index").get<int>();
  r.gpu_name = j.at("gpu_name").get<std::string>();
  r.step_ms_mean = j.at("step_ms_mean").get<double>();
  r.step_ms_p50 = j.at("step_ms_p50").get<double>();
  r.step_ms_p90 = j.at("step_ms_p90").get<double>();
  r.busy_ms = j.at("busy_ms").get<double>();
  r.tokens_per_sec = j.at("tokens_per_sec").get<double>();
  r.host_update_ms = j.at("host_update_ms").get<double>();
  r.gpu_peak_gb = j.at("gpu_peak_gb").get<double>();
  r.host_rss_gb = j.at("host_rss_gb").get<double>();
  GpuTelemetrySummary& t = r.telemetry;
  t.sm_clock_mhz = read_optional(j, "sm_clock_mhz_median");
  t.power_w = read_optional(j, "power_w_median");
  t.power_limit_w = read_optional(j, "power_limit_w");
  for (const auto& [name, share] : j.at("clock_limit_reasons").items())
    t.limit_reasons.push_back({name, share.get<double>()});
  t.samples = j.at("telemetry_samples").get<int>();
  t.unavailable = j.at("telemetry_unavailable").get<std::string>();
  return r;
}

std::vector<RankResult> gather_rank_results(const RankAgreement& agreement, const RankResult& mine) {
  std::vector<RankResult> out;
  for (const std::string& text : agreement.all_gather(to_json(mine).dump())) {
    out.push_back(rank_result_from_json(nlohmann::ordered_json::parse(text)));
  }
  return out;
}

std::vector<NodeThroughput> node_throughputs(const std::vector<RankResult>& ranks) {
  std::vector<NodeThroughput> nodes;
  for (const RankResult& r : ranks) {
    auto node = std::find_if(nodes.begin(), nodes.end(), [&](const NodeThroughput& n) { return n.host == r.host; });
    if (node == nodes.end()) node = nodes.insert(nodes.end(), NodeThroughput{r.host, {}, 0});
    node->ranks.push_back(r.rank);
    node->tokens_per_sec += r.tokens_per_sec;
  }
  return nodes;
}

RankSpread rank_spread(const std::vector<RankResult>& ranks) {
  RankSpread s;
  if (ranks.size() < 2) return s;
  std::vector<double> steps, busy;
  for (const RankResult& r : ranks) steps.push_back(r.step_ms_mean), busy.push_back(r.busy_ms);
  s.step_spread_pct = spread_pct(steps);
  s.busy_spread_pct = spread_pct(busy);
  // The slow rank by the measure that differs more (busy time, unless the step times alone differ).
  const bool by_step = s.step_spread_pct > s.busy_spread_pct;
  const auto slower = [by_step](const RankResult& a, const RankResult& b) {
    return by_step ? a.step_ms_mean < b.step_ms_mean : a.busy_ms < b.busy_ms;
  };
  const RankResult& slowest = *std::max_element(ranks.begin(), ranks.end(), slower);
  const RankResult& fastest = *std::min_element(ranks.begin(), ranks.end(), slower);
  s.slowest_rank = slowest.rank;
  s.fastest_rank = fastest.rank;
  s.flagged = s.step_spread_pct > kRankSpreadFlagPct || s.busy_spread_pct > kRankSpreadFlagPct;
  if (!s.flagged) return s;
  char head[96];
  std::snprintf(head, sizeof head, "rank %d is %.1f%% slower than rank %d", slowest.rank,
                std::max(s.step_spread_pct, s.busy_spread_pct), fastest.rank);
  s.note = head;
  std::vector<std::string> why;
  if (slowest.host_update_ms > 0) {
    why.push_back("host update " + thousands(slowest.host_update_ms) + " ms against " +
                  thousands(fastest.host_update_ms));
  }
  const GpuTelemetrySummary &slow = slowest.telemetry, &fast = fastest.telemetry;
  if (slow.sm_clock_mhz) {
    why.push_back("SM clock " + thousands(*slow.sm_clock_mhz) + " MHz" +
                  (fast.sm_clock_mhz ? " against " + thousands(*fast.sm_clock_mhz) : std::string()));
  }
  if (slow.power_w) {
    why.push_back("power " + thousands(*slow.power_w) + " W" +
                  (slow.power_limit_w ? " of " + thousands(*slow.power_limit_w) : std::string()));
  }
  if (const std::string limits = limits_text(slow); !limits.empty()) why.push_back(limits);
  if (slowest.host != fastest.host) why.push_back("host " + slowest.host);
  for (size_t i = 0; i < why.size(); ++i) s.note += (i ? ", " : ": ") + why[i];
  return s;
}

std::string format_ranks(const std::vector<RankResult>& ranks) {
  std::string out =
      "rank | host | device | step ms mean / p50 / p90 | busy ms | tok/s | device peak GB | host RSS GB | "
      "SM clock MHz | power W | clock limits\n";
  for (const RankResult& r : ranks) {
    char line[256];
    const std::string device = r.gpu_index >= 0 ? std::to_string(r.gpu_index) + " " + r.gpu_name : r.gpu_name;
    std::snprintf(line, sizeof line, "%d | %s | %s | %.1f / %.1f / %.1f | %.1f | %.0f | %.2f | %.2f | ", r.rank,
                  r.host.c_str(), device.c_str(), r.step_ms_mean, r.step_ms_p50, r.step_ms_p90, r.busy_ms,
                  r.tokens_per_sec, r.gpu_peak_gb, r.host_rss_gb);
    out += line;
    const GpuTelemetrySummary& t = r.telemetry;
    if (!t.sm_clock_mhz) {  // no samples, or too few to stand for the span (see summarise_samples)
      out += "- | - | " + t.unavailable + "\n";
      continue;
    }
    const std::string limits = limits_text(t);
    out += thousands(t.sm_clock_mhz.value_or(0)) + " | " + thousands(t.power_w.value_or(0)) +
           (t.power_limit_w ? " of " + thousands(*t.power_limit_w) : std::string()) + " | " +
           (limits.empty() ? "none" : limits) + "\n";
  }
  const RankSpread spread = rank_spread(ranks);
  char line[160];
  std::snprintf(line, sizeof line, "rank spread: step time %.1f%%, busy time %.1f%% (slowest rank %d)",
                spread.step_spread_pct, spread.busy_spread_pct, spread.slowest_rank);
  out += line;
  for (const NodeThroughput& node : node_throughputs(ranks)) {
    out += " | " + node.host + ": " + std::to_string(node.ranks.size()) + " rank(s), " +
           thousands(node.tokens_per_sec) + " tok/s";
  }
  if (spread.flagged) out += "\nWARNING: " + spread.note;
  return out;
}

}  // namespace zb

#pragma GCC diagnostic pop
