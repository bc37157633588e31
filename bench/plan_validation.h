// `plan --validate`: every configuration of measured results (zero_bench, offload_bench, sweep records) predicted
// from the profile as `plan` predicts it (its one-GPU entries and the host's collective rates; never the record's own
// figures), against what ran: step time, and the engine's peak memory (its allocator's peak, the backend's
// workspace included; what the device held outside the engine is another figure). A configuration that ran out of
// memory which the plan calls fitting is a false fit.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/plan_profile.h"

namespace zb {

struct ValidationRow {
  std::string file, label;  // the (first) record's file, and its configuration
  int world = 1;
  std::string status;  // the records': "ok", "oom", "error"
  int runs = 1;        // the records of this configuration and status
  // What the label leaves out and the prediction reads; the label names them where the records differ in them.
  int64_t seq = 0;
  std::string dtype, optimizer;
  bool false_fit = false;  // ran out of memory where the plan says it fits
  std::optional<double> measured_ms, predicted_ms;  // measured: the median of the runs' steps
  std::optional<double> fastest_ms, slowest_ms;     // the runs' range, where there are several
  std::optional<double> measured_peak_gb, predicted_peak_gb;
  bool predicted_fit = true;
  std::string note;  // why a figure is missing
  std::optional<double> time_error_pct() const;
  std::optional<double> memory_error_pct() const;
};

struct Validation {
  std::vector<ValidationRow> rows;
  std::optional<double> median_time_error_pct, worst_time_error_pct;  // absolute errors
  std::optional<double> median_memory_error_pct, worst_memory_error_pct;
  int false_fits = 0;  // configurations (not records) that ran out of memory where the plan says they fit
  std::vector<std::string> skipped;  // records of another model, LoRA records, ...: why each was left out
};

// Throws UsageError naming the file that cannot be read or is not a JSON array of records.
Validation validate_plan(const PlanProfile& profile, const std::vector<std::string>& record_files);

// The table `plan --validate` prints, with the summary lines after it.
std::string validation_report(const Validation& validation);

}  // namespace zb
