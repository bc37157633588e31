// The profile of a model on a GPU type, which a sweep writes and a planner reads:
// <output-dir>/profiles/<model>/<gpu>/profile.json. Per configuration that ran (micro-batch, sequence length and
// the rest of its settings), the forward and backward time of each unit per micro-batch, the optimizer's time per
// parameter (GPU and CPU), the bytes of each collective kind per unit, and the memory per pool, measured and
// predicted; and per machine, its peak rates as measured there (bench/peak_rates.h). `sweep --gather` merges the
// profiles of several runs and hosts into one, refusing those of another model, GPU type or code version: a planner
// must not mix measurements of different code.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_record.h"
#include "bench/peak_rates.h"
#include "bench/step_breakdown.h"

namespace zb {

inline constexpr const char* kModelProfileFormat = "zerobench model profile 1";

// A run's own name in the profiles it writes ("<host>-<UTC time>-<random hex>"): what ties its entries to its
// machine's measurement, even for two runs on one host in the same second.
std::string new_profile_run_id(const RunEnvironment& environment);

// One configuration's entry. `record`: its result (ok); `breakdown`: its profiled window split by units;
// `gpu_parameters`, `cpu_parameters`: the trainable elements each rank updates on the GPU and on the host.
nlohmann::ordered_json profile_entry(const std::string& run_id, const BenchRecord& record,
                                     const StepBreakdown& breakdown, double gpu_parameters, double cpu_parameters);

// A run's machine: where the entries of `run_id` were measured, and its rates.
nlohmann::ordered_json profile_machine(const std::string& run_id, const RunEnvironment& environment,
                                       const PeakRates& rates);

// An empty profile of `model` (its parameter count) on `gpu`, made by `code_version`.
nlohmann::ordered_json new_model_profile(const std::string& model, int64_t parameters, const std::string& gpu,
                                         const std::string& code_version);

// Adds `entry` to `profile`, replacing one of the same host and configuration (a later measurement of it), and the
// machine unless the profile has it (the same run).
void add_to_profile(nlohmann::ordered_json& profile, const nlohmann::ordered_json& machine,
                    const nlohmann::ordered_json& entry);

// The folder of a model's profile on a GPU under `output_dir`: profiles/<model>/<gpu>, each name as
// profile_file_label writes it ("meta-llama/Llama-2-7b-hf" gives "meta-llama_Llama-2-7b-hf", "NVIDIA H200"
// "NVIDIA_H200").
std::string model_profile_folder(const std::string& output_dir, const std::string& model, const std::string& gpu);

// `sweep --gather`: every profile.json (and profile_N.json) under `folders`, merged. Throws UsageError naming the
// file where one is not a profile, or is of another model, GPU type or code version than the first.
nlohmann::ordered_json gather_model_profiles(const std::vector<std::string>& folders);

}  // namespace zb
