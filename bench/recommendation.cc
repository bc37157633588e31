#include "bench/recommendation.h"

#include <algorithm>
#include <cstdio>

namespace zb {

namespace {

constexpr double kBarelyFits = 0.9;  // of the GPU's memory

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

// A failure's reason as the table shows it: its first line (messages may carry more, e.g. a rank's), or
// `otherwise` where there is none.
std::string first_line(const std::string& message, const char* otherwise) {
  const std::string line = message.substr(0, message.find('\n'));
  return line.empty() ? otherwise : line;
}

double relative_spread(const BenchRecord& r) {
  return relative_step_spread(r.step_time_stddev_ms, r.avg_step_time_ms);
}

// Less machinery: no offload before offload, then the lower stage ("simpler is better when you have memory
// to spare").
bool simpler(const BenchRecord& a, const BenchRecord& b) {
  const bool a_offloads = a.strategy != "none", b_offloads = b.strategy != "none";
  if (a_offloads != b_offloads) return !a_offloads;
  return a.stage < b.stage;
}

}  // namespace

std::optional<size_t> recommend(std::vector<BenchRecord>& records, std::optional<double> gpu_capacity_gb) {
  const auto measured = [](const BenchRecord& r) { return r.ok() && r.throughput_tokens_per_sec.has_value(); };
  const auto barely_fits = [&](const BenchRecord& r) {
    return gpu_capacity_gb && r.gpu_peak_gb && *r.gpu_peak_gb > kBarelyFits * *gpu_capacity_gb;
  };
  std::optional<size_t> fastest;
  for (size_t i = 0; i < records.size(); ++i) {
    if (!measured(records[i])) continue;
    if (!fastest || *records[i].throughput_tokens_per_sec > *records[*fastest].throughput_tokens_per_sec) fastest = i;
  }
  // Ties with the fastest, within the noise of the two runs; among them the simplest that fits with room.
  const auto tied_with_fastest = [&](size_t i) {
    const BenchRecord &a = records[i], &b = records[*fastest];
    const double gap = 1.0 - *a.throughput_tokens_per_sec / *b.throughput_tokens_per_sec;
    return gap < std::max(relative_spread(a), relative_spread(b));
  };
  std::optional<size_t> best = fastest;
  if (fastest) {
    for (size_t i = 0; i < records.size(); ++i) {
      if (!measured(records[i]) || !tied_with_fastest(i) || barely_fits(records[i])) continue;
      if (barely_fits(records[*best]) || simpler(records[i], records[*best])) best = i;
    }
  }
  for (size_t i = 0; i < records.size(); ++i) {
    BenchRecord& r = records[i];
    if (r.status == "oom") {
      r.recommendation = "does not fit: " + first_line(r.error, "out of memory");
      continue;
    }
    if (!measured(r)) {
      r.recommendation = r.status == "interrupted" ? "not measured: interrupted"
                                                   : r.status + ": " + first_line(r.error, "no reason recorded");
      continue;
    }
    const BenchRecord& b = records[*best];
    if (i == *best) {
      r.recommendation = "OPTIMAL";
      if (*best != *fastest) {
        const double faster =
            100.0 * (*records[*fastest].throughput_tokens_per_sec / *r.throughput_tokens_per_sec - 1.0);
        r.recommendation += " (a tie: " + records[*fastest].label() + " is " + format("%.1f%%", faster) +
                            " faster, within the step-time spread; this one is simpler)";
      }
    } else {
      const double slower = 100.0 * (1.0 - *r.throughput_tokens_per_sec / *b.throughput_tokens_per_sec);
      r.recommendation = slower >= 0 ? format("%.1f%% slower", slower) : format("%.1f%% faster", -slower);
      if (r.gpu_peak_gb && b.gpu_peak_gb) {
        const double more = *r.gpu_peak_gb - *b.gpu_peak_gb;
        r.recommendation += more >= 0 ? format(", %.3g GB more memory", more) : format(", %.3g GB less memory", -more);
      }
      if (tied_with_fastest(i)) {
        // (The spread that made it a tie: of this run and the fastest.)
        r.recommendation += format("; a tie: within the step-time spread (%.1f%%)",
                                   100.0 * std::max(relative_spread(r), relative_spread(records[*fastest])));
      }
    }
    if (barely_fits(r)) {
      r.recommendation += format("; barely fits (%.0f%% of GPU memory)", 100.0 * *r.gpu_peak_gb / *gpu_capacity_gb);
    }
    if (!r.rank_spread_note.empty()) r.recommendation += "; " + r.rank_spread_note;
  }
  return best;
}

}  // namespace zb
