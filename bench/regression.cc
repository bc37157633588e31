#include "bench/regression.h"

#include <cstdio>
#include <fstream>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

namespace {

using Json = nlohmann::json;

// What identifies a configuration across runs.
std::string key_of(const Json& j) {
  return cat(j.value("model", ""), " stage ", j.value("stage", -1), " ", j.value("strategy", ""), " world ",
             j.value("world_size", 0), " batch ", j.value("batch_size", int64_t(0)), " seq ",
             j.value("seq_length", int64_t(0)), " accum ", j.value("grad_accum", int64_t(0)), " ",
             j.value("dtype", ""));
}

std::optional<double> number(const Json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

std::string fixed(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.4g", value);
  return text;
}

}  // namespace

std::vector<std::string> find_regressions(const std::vector<BenchRecord>& current, const std::string& baseline_path,
                                          double max_regression_percent) {
  Json baseline;
  try {
    std::ifstream in(baseline_path);
    if (!in) throw UsageError("cannot be read");
    baseline = Json::parse(in);
  } catch (const Json::exception& e) {
    throw UsageError(cat("--baseline ", baseline_path, ": not JSON: ", e.what()));
  } catch (const UsageError& e) {
    throw UsageError(cat("--baseline ", baseline_path, ": ", e.what()));
  }
  if (!baseline.is_array()) throw UsageError(cat("--baseline ", baseline_path, ": not an array of results"));
  const double allowed = max_regression_percent / 100.0;
  std::vector<std::string> out;
  for (const BenchRecord& record : current) {
    const Json now = Json::parse(to_json(record).dump());
    const std::string key = key_of(now);
    for (const Json& then : baseline) {
      if (!then.is_object() || key_of(then) != key) continue;
      const bool was_ok = then.value("status", "") == "ok";
      if (was_ok && !record.ok()) {
        out.push_back(
            cat(key, ": status ", record.status, " (baseline: ok)", record.error.empty() ? "" : ": " + record.error));
        continue;
      }
      const auto old_rate = number(then, "throughput_tokens_per_sec"), new_rate = record.throughput_tokens_per_sec;
      if (old_rate && new_rate && *new_rate < *old_rate * (1 - allowed)) {
        out.push_back(cat(key, ": throughput ", fixed(*new_rate), " tokens/s, ",
                          fixed(100 * (1 - *new_rate / *old_rate)), "% below the baseline's ", fixed(*old_rate),
                          " (allowed: ", max_regression_percent, "%)"));
      }
      const auto old_peak = number(then, "gpu_peak_gb"), new_peak = record.gpu_peak_gb;
      if (old_peak && new_peak && *old_peak > 0 && *new_peak > *old_peak * (1 + allowed)) {
        out.push_back(cat(key, ": GPU peak memory ", fixed(*new_peak), " GB, ",
                          fixed(100 * (*new_peak / *old_peak - 1)), "% above the baseline's ", fixed(*old_peak),
                          " GB (allowed: ", max_regression_percent, "%)"));
      }
      break;
    }
  }
  return out;
}

}  // namespace zb
