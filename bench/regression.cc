#include "bench/regression.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/dtype.h"
#include "core/errors.h"
#include "core/strings.h"

namespace zb {

namespace {

using Json = nlohmann::json;

// The fields a baseline record must hold: its identity, its outcome and what is compared.
constexpr const char* kIdentity[] = {"model",      "stage",      "strategy", "world_size", "batch_size",
                                     "seq_length", "grad_accum", "dtype",    "status"};
constexpr const char* kCompared[] = {"throughput_tokens_per_sec", "gpu_peak_gb"};

std::string key_of(const Json& j) {
  return configuration_key(j.value("model", ""), j.value("stage", -1), j.value("strategy", ""),
                           j.value("world_size", 0), j.value("batch_size", int64_t(0)),
                           j.value("seq_length", int64_t(0)), j.value("grad_accum", int64_t(0)), j.value("dtype", ""),
                           j.value("activation_checkpointing", "none"), j.value("optimizer", "adamw"),
                           j.value("lora", "none"));
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

std::string configuration_key(const std::string& model, int stage, const std::string& strategy, int world,
                              int64_t batch, int64_t seq, int64_t grad_accum, const std::string& dtype,
                              const std::string& checkpointing, const std::string& optimizer,
                              const std::string& lora) {
  return cat(model, " stage ", stage, " ", strategy, " world ", world, " batch ", batch, " seq ", seq, " accum ",
             grad_accum, " ", dtype, checkpointing == "none" ? "" : " ckpt " + checkpointing,
             optimizer == "adamw" ? "" : " " + optimizer, lora == "none" ? "" : " LoRA " + lora);
}

std::string configuration_key(const TrainingOptions& o, int world) {
  return configuration_key(o.model.name, o.zero.stage, offload_spec_name(o.offload, o.offload_ratio), world, o.batch,
                           o.seq, o.grad_accum, std::string(dtype_name(o.dtype)),
                           std::string(activation_checkpointing_name(o.activation_checkpointing)),
                           optimizer_name(o.optimizer), lora_description(o.model.lora));
}

Baseline::Baseline(const std::string& path) : path_(path) {
  try {
    std::ifstream in(path);
    if (!in) throw UsageError("cannot be read");
    records_ = Json::parse(in);
  } catch (const Json::exception& e) {
    throw UsageError(cat("--baseline ", path, ": not JSON: ", e.what()));
  } catch (const UsageError& e) {
    throw UsageError(cat("--baseline ", path, ": ", e.what()));
  }
  if (!records_.is_array()) throw UsageError(cat("--baseline ", path, ": not an array of results"));
  if (records_.empty()) throw UsageError(cat("--baseline ", path, ": holds no results (an empty array)"));
  for (size_t i = 0; i < records_.size(); ++i) {
    const Json& r = records_[i];
    if (!r.is_object()) throw UsageError(cat("--baseline ", path, ": result ", i + 1, " is not an object"));
    std::vector<std::string> missing;
    for (const char* field : kIdentity)
      if (!r.contains(field)) missing.emplace_back(field);
    for (const char* field : kCompared)
      if (!r.contains(field)) missing.emplace_back(field);
    if (!missing.empty()) {
      throw UsageError(cat("--baseline ", path, ": result ", i + 1, " lacks ", join(missing, ", "),
                           " (not a zero_bench or offload_bench results file?)"));
    }
  }
}

std::vector<std::string> Baseline::keys() const {
  std::vector<std::string> out;
  for (const Json& r : records_) out.push_back(key_of(r));
  return out;
}

void Baseline::require_shared(const std::vector<std::string>& planned) const {
  const std::vector<std::string> known = keys();
  for (const std::string& key : planned)
    if (std::find(known.begin(), known.end(), key) != known.end()) return;
  throw UsageError(cat("--baseline ", path_, ": shares no configuration with this run, so nothing could be compared; ",
                       "this run: ", join(planned, "; "), "; the baseline: ", join(known, "; ")));
}

Baseline::Report Baseline::compare(const std::vector<BenchRecord>& current, double max_regression_percent) const {
  const double allowed = max_regression_percent / 100.0;
  Report report;
  std::vector<std::string> seen;
  for (const BenchRecord& record : current) {
    const Json now = Json::parse(to_json(record).dump());
    const std::string key = key_of(now);
    seen.push_back(key);
    const auto then_it =
        std::find_if(records_.begin(), records_.end(), [&](const Json& then) { return key_of(then) == key; });
    if (then_it == records_.end()) {
      report.only_now.push_back(key);
      continue;
    }
    const Json& then = *then_it;
    Row row;
    row.key = key;
    row.baseline_tokens_per_sec = number(then, "throughput_tokens_per_sec");
    row.now_tokens_per_sec = record.throughput_tokens_per_sec;
    row.baseline_peak_gb = number(then, "gpu_peak_gb");
    row.now_peak_gb = record.gpu_peak_gb;
    row.noise_pct =
        100.0 * std::max(relative_step_spread(number(then, "step_time_stddev_ms"), number(then, "avg_step_time_ms")),
                         relative_step_spread(record.step_time_stddev_ms, record.avg_step_time_ms));
    std::vector<std::string> found;
    const bool was_ok = then.value("status", "") == "ok";
    if (was_ok && !record.ok()) {
      found.push_back(
          cat("status ", record.status, " (baseline: ok)", record.error.empty() ? "" : ": " + record.error));
    } else {
      const auto old_rate = row.baseline_tokens_per_sec, new_rate = row.now_tokens_per_sec;
      const double threshold = std::max(allowed, row.noise_pct / 100.0);
      if (old_rate && new_rate && *new_rate < *old_rate * (1 - threshold)) {
        found.push_back(cat("throughput ", fixed(*new_rate), " tokens/s, ", fixed(100 * (1 - *new_rate / *old_rate)),
                            "% below the baseline's ", fixed(*old_rate), " (allowed: ", max_regression_percent,
                            "%, noise: ", fixed(row.noise_pct), "%)"));
      }
      const auto old_peak = row.baseline_peak_gb, new_peak = row.now_peak_gb;
      if (old_peak && new_peak && *old_peak > 0 && *new_peak > *old_peak * (1 + allowed)) {
        found.push_back(cat("GPU peak memory ", fixed(*new_peak), " GB, ", fixed(100 * (*new_peak / *old_peak - 1)),
                            "% above the baseline's ", fixed(*old_peak), " GB (allowed: ", max_regression_percent,
                            "%)"));
      }
    }
    for (const std::string& what : found) report.regressions.push_back(cat(key, ": ", what));
    row.verdict = found.empty() ? "ok" : "REGRESSION: " + join(found, "; ");
    report.rows.push_back(std::move(row));
  }
  for (const std::string& key : keys())
    if (std::find(seen.begin(), seen.end(), key) == seen.end()) report.only_baseline.push_back(key);
  return report;
}

std::string Baseline::markdown(const Report& report, double max_regression_percent) const {
  const auto rate = [](const std::optional<double>& v) { return v ? fixed(*v) + " tok/s" : std::string("-"); };
  const auto memory = [](const std::optional<double>& v) { return v ? fixed(*v) + " GB" : std::string("-"); };
  std::string out = cat("## Regression check against `", path_, "`\n\n",
                        report.regressions.empty() ? "No regression" : cat(report.regressions.size(), " regression(s)"),
                        ": a drop counts when it exceeds both ", max_regression_percent,
                        "% and the noise of the two runs (their larger step-time standard deviation).\n\n",
                        "| configuration | baseline | now | change | noise | peak memory (baseline, now) | verdict |\n",
                        "|---|---|---|---|---|---|---|\n");
  for (const Row& row : report.rows) {
    std::string change = "-";
    if (row.baseline_tokens_per_sec && row.now_tokens_per_sec && *row.baseline_tokens_per_sec > 0) {
      char text[32];
      std::snprintf(text, sizeof text, "%+.1f%%", 100 * (*row.now_tokens_per_sec / *row.baseline_tokens_per_sec - 1));
      change = text;
    }
    char noise[32];
    std::snprintf(noise, sizeof noise, "%.1f%%", row.noise_pct);
    out += cat("| ", row.key, " | ", rate(row.baseline_tokens_per_sec), " | ", rate(row.now_tokens_per_sec), " | ",
               change, " | ", noise, " | ", memory(row.baseline_peak_gb), ", ", memory(row.now_peak_gb), " | ",
               row.verdict, " |\n");
  }
  for (const std::string& key : report.only_now) out += cat("\nNot in the baseline (not compared): ", key, "\n");
  for (const std::string& key : report.only_baseline) out += cat("\nIn the baseline only: ", key, "\n");
  return out;
}

}  // namespace zb
