#include "bench/plan_validation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench/json_file.h"
#include "bench/percentile.h"
#include "bench/plan_search.h"
#include "bench/text_table.h"
#include "core/errors.h"
#include "core/strings.h"
#include "engine/offload_strategy.h"
#include "models/model_registry.h"

namespace zb {

namespace {

using Json = nlohmann::json;

std::optional<double> error_pct(const std::optional<double>& predicted, const std::optional<double>& measured) {
  if (!predicted || !measured || *measured <= 0) return std::nullopt;
  return (*predicted - *measured) / *measured * 100;
}

std::optional<double> number(const Json& record, const char* key) {
  if (!record.contains(key) || !record.at(key).is_number()) return std::nullopt;
  return record.at(key).get<double>();
}

// The options a record ran with (the ZeRO knobs at their defaults, which the records do not carry).
TrainingOptions options_of(const Json& r) {
  TrainingOptions o;
  o.model = resolve_model(r.at("model").get<std::string>());
  o.batch = r.at("batch_size").get<int64_t>();
  o.seq = r.at("seq_length").get<int64_t>();
  o.grad_accum = r.at("grad_accum").get<int64_t>();
  o.dtype = parse_dtype(r.at("dtype").get<std::string>());
  set_optimizer(o.optimizer, r.at("optimizer").get<std::string>());
  o.activation_checkpointing = parse_activation_checkpointing(r.at("activation_checkpointing").get<std::string>());
  o.zero.stage = r.at("stage").get<int>();
  const StrategySpec parsed = parse_strategy_spec(r.at("strategy").get<std::string>());
  o.offload = parsed.strategy;
  o.offload_ratio = parsed.ratio;
  if (o.batch < 1 || o.seq < 1 || o.grad_accum < 1 || o.zero.stage < 0 || o.zero.stage > 3) {
    throw std::invalid_argument(cat("a configuration out of range (batch ", o.batch, ", seq ", o.seq, ", accumulation ",
                                    o.grad_accum, ", stage ", o.zero.stage, ")"));
  }
  return o;
}

struct Summary {
  std::optional<double> median, worst;
};

Summary summarise(std::vector<double> errors) {
  if (errors.empty()) return {};
  for (double& e : errors) e = std::abs(e);
  return {median(errors), *std::max_element(errors.begin(), errors.end())};
}

bool same_configuration(const ValidationRow& a, const ValidationRow& b) {
  return a.label == b.label && a.seq == b.seq && a.dtype == b.dtype && a.optimizer == b.optimizer &&
         a.status == b.status;
}

// The rows of one configuration and status (the records of its repeats) as one, in the order of first appearance:
// the median of their measured steps and peaks, with the steps' range.
std::vector<ValidationRow> merge_repeats(const std::vector<ValidationRow>& rows) {
  std::vector<ValidationRow> merged;
  std::vector<std::vector<double>> steps, peaks;
  for (const ValidationRow& row : rows) {
    auto same = std::find_if(merged.begin(), merged.end(),
                             [&](const ValidationRow& m) { return same_configuration(m, row); });
    size_t i = size_t(same - merged.begin());
    if (same == merged.end()) {
      merged.push_back(row);
      merged.back().runs = 0;
      steps.emplace_back();
      peaks.emplace_back();
    }
    ++merged[i].runs;
    if (row.measured_ms) steps[i].push_back(*row.measured_ms);
    if (row.measured_peak_gb) peaks[i].push_back(*row.measured_peak_gb);
  }
  for (size_t i = 0; i < merged.size(); ++i) {
    if (!steps[i].empty()) {
      merged[i].measured_ms = median(steps[i]);
      merged[i].fastest_ms = *std::min_element(steps[i].begin(), steps[i].end());
      merged[i].slowest_ms = *std::max_element(steps[i].begin(), steps[i].end());
    }
    if (!peaks[i].empty()) merged[i].measured_peak_gb = median(peaks[i]);
  }
  return merged;
}

// Appends the sequence length, dtype and optimizer to every row's label where the rows differ in them.
void name_what_differs(std::vector<ValidationRow>& rows) {
  auto differ = [&](auto field) {
    return std::any_of(rows.begin(), rows.end(), [&](const ValidationRow& r) { return field(r) != field(rows[0]); });
  };
  const bool seqs = differ([](const ValidationRow& r) { return cat(r.seq); });
  const bool dtypes = differ([](const ValidationRow& r) { return r.dtype; });
  const bool optimizers = differ([](const ValidationRow& r) { return r.optimizer; });
  for (ValidationRow& r : rows) {
    if (seqs) r.label += cat(", seq ", r.seq);
    if (dtypes) r.label += ", " + r.dtype;
    if (optimizers) r.label += ", " + r.optimizer;
  }
}

}  // namespace

std::optional<double> ValidationRow::time_error_pct() const {
  return error_pct(predicted_ms, measured_ms);
}
std::optional<double> ValidationRow::memory_error_pct() const {
  return error_pct(predicted_peak_gb, measured_peak_gb);
}

Validation validate_plan(const PlanProfile& profile, const std::vector<std::string>& record_files) {
  Validation v;
  for (const std::string& file : record_files) {
    const Json records = read_json_file(file, cat("--validate ", file));
    if (!records.is_array()) throw UsageError(cat("--validate ", file, ": not a JSON array of result records"));
    for (const Json& r : records) {
      try {
        const std::string model = r.at("model").get<std::string>();
        if (model != profile.model) {
          v.skipped.push_back(cat(file, ": ", model, " (the profile is of ", profile.model, ")"));
          continue;
        }
        if (r.value("lora_rank", 0) > 0) {
          v.skipped.push_back(cat(file, ": a LoRA configuration (its adapters' settings are not in the record)"));
          continue;
        }
        ValidationRow row;
        row.file = file;
        row.status = r.at("status").get<std::string>();
        row.world = r.at("world_size").get<int>();
        if (row.world < 1) throw std::invalid_argument(cat("world_size ", row.world));
        const TrainingOptions options = options_of(r);
        ClusterSpec cluster;
        cluster.gpus_per_node = row.world;
        cluster.nodes = 1;
        cluster.gpu_memory_gb = number(r, "gpu_capacity_gb");
        if (!cluster.gpu_memory_gb) cluster.gpu_memory_gb = profile.gpu_capacity_gb();
        const CollectiveLinks links = cluster_links(cluster, profile);
        const PlannedConfiguration planned = plan_configuration(profile, options, cluster, links, 0, std::nullopt);
        row.label = cat(row.world, " GPU", row.world > 1 ? "s" : "", ", ", planned.label());
        row.seq = options.seq;
        row.dtype = std::string(dtype_name(options.dtype));
        row.optimizer = optimizer_name(options.optimizer);
        row.predicted_peak_gb = double(planned.memory.peak) / 1e9;
        row.predicted_fit = planned.fits;
        if (planned.time)
          row.predicted_ms = planned.time->step_ms;
        else
          row.note = planned.why_not;
        if (row.status == "ok") {
          row.measured_ms = number(r, "avg_step_time_ms");
          row.measured_peak_gb = number(r, "gpu_peak_gb");
        } else if (row.status == "oom" && planned.fits && cluster.gpu_memory_gb) {
          row.false_fit = true;
          row.note = "ran out of memory where the plan says it fits";
        }
        v.rows.push_back(row);
      } catch (const UsageError& e) {
        throw UsageError(cat("--validate ", file, ": ", e.what()));
      } catch (const std::exception& e) {  // (a missing or mistyped field, or one out of range)
        throw UsageError(cat("--validate ", file, ": a record missing what the planner reads (", e.what(), ")"));
      }
    }
  }
  v.rows = merge_repeats(v.rows);
  if (!v.rows.empty()) name_what_differs(v.rows);
  v.false_fits = int(std::count_if(v.rows.begin(), v.rows.end(), [](const ValidationRow& r) { return r.false_fit; }));
  std::vector<double> time_errors, memory_errors;
  for (const ValidationRow& row : v.rows) {
    if (auto e = row.time_error_pct()) time_errors.push_back(*e);
    if (auto e = row.memory_error_pct()) memory_errors.push_back(*e);
  }
  const Summary t = summarise(time_errors), m = summarise(memory_errors);
  v.median_time_error_pct = t.median, v.worst_time_error_pct = t.worst;
  v.median_memory_error_pct = m.median, v.worst_memory_error_pct = m.worst;
  return v;
}

std::string validation_report(const Validation& v) {
  std::vector<std::vector<std::string>> rows{{"Configuration", "Status", "Step (measured)", "Step (predicted)", "Error",
                                              "Peak (measured)", "Peak (predicted)", "Error", "Runs"}};
  for (const ValidationRow& r : v.rows) {
    std::string runs = std::to_string(r.runs);
    if (r.runs > 1 && r.fastest_ms) {
      runs += cat(" (", table_number(r.fastest_ms, "%.1f"), "-", table_number(r.slowest_ms, "%.1f ms"), ")");
    }
    rows.push_back(
        {r.label, r.status, table_number(r.measured_ms, "%.1f ms"), table_number(r.predicted_ms, "%.1f ms"),
         table_number(r.time_error_pct(), "%+.1f%%"), r.measured_peak_gb ? memory_text(*r.measured_peak_gb) : "-",
         r.predicted_peak_gb ? memory_text(*r.predicted_peak_gb) : "-", table_number(r.memory_error_pct(), "%+.2f%%"),
         runs});
    if (!r.note.empty()) rows.back().back() += "  (" + r.note + ")";
  }
  std::string out = text_table(rows);
  out += cat("step time: median error ", table_number(v.median_time_error_pct, "%.1f%%"), ", worst ",
             table_number(v.worst_time_error_pct, "%.1f%%"), "\n");
  out += cat("peak memory: median error ", table_number(v.median_memory_error_pct, "%.2f%%"), ", worst ",
             table_number(v.worst_memory_error_pct, "%.2f%%"), "; ", v.false_fits,
             " configuration(s) that ran out of memory called fitting\n");
  for (const std::string& s : v.skipped) out += "left out: " + s + "\n";
  return out;
}

}  // namespace zb
