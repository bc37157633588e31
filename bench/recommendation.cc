#include "bench/recommendation.h"

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

}  // namespace

std::optional<size_t> recommend(std::vector<BenchRecord>& records, std::optional<double> gpu_capacity_gb) {
  std::optional<size_t> best;
  for (size_t i = 0; i < records.size(); ++i) {
    const BenchRecord& r = records[i];
    if (!r.ok() || !r.throughput_tokens_per_sec) continue;
    if (!best || *r.throughput_tokens_per_sec > *records[*best].throughput_tokens_per_sec) best = i;
  }
  for (size_t i = 0; i < records.size(); ++i) {
    BenchRecord& r = records[i];
    if (r.status == "oom") {
      r.recommendation = "does not fit: " + first_line(r.error, "out of memory");
      continue;
    }
    if (!r.ok() || !r.throughput_tokens_per_sec) {
      r.recommendation = r.status == "interrupted" ? "not measured: interrupted"
                                                   : r.status + ": " + first_line(r.error, "no reason recorded");
      continue;
    }
    if (i == *best) {
      r.recommendation = "OPTIMAL";
    } else {
      const BenchRecord& b = records[*best];
      const double slower = 100.0 * (1.0 - *r.throughput_tokens_per_sec / *b.throughput_tokens_per_sec);
      r.recommendation = format("%.1f%% slower", slower);
      if (r.gpu_peak_gb && b.gpu_peak_gb) {
        const double more = *r.gpu_peak_gb - *b.gpu_peak_gb;
        r.recommendation += more >= 0 ? format(", %.3g GB more memory", more) : format(", %.3g GB less memory", -more);
      }
    }
    if (gpu_capacity_gb && r.gpu_peak_gb && *r.gpu_peak_gb > kBarelyFits * *gpu_capacity_gb) {
      r.recommendation += format("; barely fits (%.0f%% of GPU memory)", 100.0 * *r.gpu_peak_gb / *gpu_capacity_gb);
    }
    if (!r.rank_spread_note.empty()) r.recommendation += "; " + r.rank_spread_note;
  }
  return best;
}

}  // namespace zb
