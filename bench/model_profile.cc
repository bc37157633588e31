#include "bench/model_profile.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "bench/profiler.h"
#include "core/errors.h"
#include "core/strings.h"

namespace zb {

namespace {

using Json = nlohmann::ordered_json;

Json optional_number(const std::optional<double>& value) {
  return value ? Json(*value) : Json(nullptr);
}

Json bytes_by_kind(const std::map<std::string, double>& bytes) {
  Json out = Json::object();
  for (const auto& [kind, value] : bytes) out[kind] = value;
  return out;
}

// What makes two entries the same measurement: the host and everything of the configuration.
Json entry_key(const Json& entry) {
  return Json{entry.at("host"), entry.at("configuration")};
}

}  // namespace

std::string new_profile_run_id(const RunEnvironment& environment) {
  std::random_device random;
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, "%08x%08x", unsigned(random()), unsigned(random()));
  return cat(environment.host_name, "-", environment.timestamp, "-", suffix);
}

Json profile_entry(const std::string& run_id, const BenchRecord& r, const StepBreakdown& b, double gpu_parameters,
                   double cpu_parameters) {
  const double micro_batches = double(std::max<int64_t>(r.grad_accum, 1));
  Json entry;
  entry["run"] = run_id;
  entry["host"] = r.environment.host_name;
  entry["timestamp"] = r.environment.timestamp;
  entry["configuration"] = {{"micro_batch", r.batch_size},
                            {"seq_length", r.seq_length},
                            {"grad_accum", r.grad_accum},
                            {"world_size", r.world_size},
                            {"stage", r.stage},
                            {"strategy", r.strategy},
                            {"dtype", r.dtype},
                            {"optimizer", r.optimizer},
                            {"activation_checkpointing", r.activation_checkpointing},
                            {"lora_rank", r.lora_rank}};
  entry["step_ms"] = optional_number(r.avg_step_time_ms);
  entry["profiled_step_ms"] = b.step_ms;
  entry["profiled_steps"] = b.steps;
  Json units = Json::array();
  for (const UnitTimes& u : b.units) {
    units.push_back({{"unit", u.unit},
                     {"forward_ms", u.forward_ms / micro_batches},
                     {"backward_ms", u.backward_ms / micro_batches},
                     {"collective_bytes_per_step", bytes_by_kind(u.collective_bytes)}});
  }
  entry["units"] = units;  // per micro-batch
  const auto per_parameter_ns = [](double ms, double parameters) {
    return parameters > 0 && ms > 0 ? Json(ms * 1e6 / parameters) : Json(nullptr);
  };
  // cpu_ms: the host update of the profiled steps, which the units' times add up with; timed_cpu_ms: of the timed
  // steps, the same steps as step_ms (profiling slows or speeds the host update by tens of percent).
  entry["optimizer"] = {{"gpu_ms", b.optimizer_ms},
                        {"cpu_ms", b.cpu_optimizer_ms},
                        {"timed_cpu_ms", optional_number(r.offload_cpu_optimizer_ms)},
                        {"gpu_parameters", gpu_parameters},
                        {"cpu_parameters", cpu_parameters},
                        {"gpu_ns_per_parameter", per_parameter_ns(b.optimizer_ms, gpu_parameters)},
                        {"cpu_ns_per_parameter", per_parameter_ns(b.cpu_optimizer_ms, cpu_parameters)}};
  entry["other_compute_ms"] = b.other_ms;
  entry["collective_bytes_outside_units_per_step"] = bytes_by_kind(b.collective_bytes_outside_units);
  entry["exposed_ms"] = {{"compute", optional_number(r.exposed_compute_ms)},
                         {"collectives", optional_number(r.exposed_collectives_ms)},
                         {"copies", optional_number(r.exposed_copies_ms)},
                         {"cpu_optimizer", optional_number(r.exposed_cpu_optimizer_ms)},
                         {"nvme", optional_number(r.exposed_nvme_ms)},
                         {"idle", optional_number(r.exposed_idle_ms)}};
  entry["memory_gb"] = {{"measured",
                         {{"parameters", optional_number(r.parameters_gb)},
                          {"gradients", optional_number(r.gradients_gb)},
                          {"optimizer_state", optional_number(r.optimizer_state_gb)},
                          {"activations", optional_number(r.activations_gb)},
                          {"workspace", optional_number(r.workspace_gb)},
                          {"peak", optional_number(r.gpu_peak_gb)}}},
                        {"predicted",
                         {{"parameters", optional_number(r.predicted_parameters_gb)},
                          {"gradients", optional_number(r.predicted_gradients_gb)},
                          {"optimizer_state", optional_number(r.predicted_optimizer_state_gb)},
                          {"activations", optional_number(r.predicted_activations_gb)},
                          {"workspace", optional_number(r.predicted_workspace_gb)},
                          {"peak", optional_number(r.predicted_gpu_peak_gb)}}},
                        {"backend_workspace", optional_number(r.backend_workspace_gb)},
                        {"outside_engine", optional_number(r.gpu_outside_engine_gb)},
                        {"gpu_capacity", optional_number(r.gpu_capacity_gb)},
                        {"host_pinned", optional_number(r.cpu_pinned_gb)}};
  return entry;
}

Json profile_machine(const std::string& run_id, const RunEnvironment& e, const PeakRates& rates) {
  return Json{{"run", run_id},
              {"host", e.host_name},
              {"machine_name", e.machine_name},
              {"cloud_provider", e.cloud_provider},
              {"gpu", e.gpu_name},
              {"gpu_count", e.gpu_count},
              {"driver_version", e.driver_version},
              {"cuda_version", e.cuda_version},
              {"nccl_version", e.nccl_version},
              {"timestamp", e.timestamp},
              {"peak_rates", to_json(rates)}};
}

Json new_model_profile(const std::string& model, int64_t parameters, const std::string& gpu,
                       const std::string& code_version) {
  return Json{{"format", kModelProfileFormat}, {"model", model},
              {"parameters", parameters},      {"gpu", gpu},
              {"code_version", code_version},  {"machines", Json::array()},
              {"entries", Json::array()}};
}

void add_to_profile(Json& profile, const Json& machine, const Json& entry) {
  Json& machines = profile["machines"];
  const bool known =
      std::any_of(machines.begin(), machines.end(), [&](const Json& m) { return m.at("run") == machine.at("run"); });
  if (!known) machines.push_back(machine);
  Json& entries = profile["entries"];
  const Json key = entry_key(entry);
  for (Json& e : entries) {
    if (entry_key(e) == key) {
      if (e.value("timestamp", std::string()) <= entry.value("timestamp", std::string())) e = entry;
      return;
    }
  }
  entries.push_back(entry);
}

std::string model_profile_folder(const std::string& output_dir, const std::string& model, const std::string& gpu) {
  return (std::filesystem::path(output_dir) / "profiles" / profile_file_label(model) / profile_file_label(gpu))
      .string();
}

Json gather_model_profiles(const std::vector<std::string>& folders) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const std::string& folder : folders) {
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) throw UsageError(cat("--gather: ", folder, " is not a folder"));
    for (auto it = fs::recursive_directory_iterator(folder, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (it->is_regular_file() && name.rfind("profile", 0) == 0 && it->path().extension() == ".json" &&
          it->path().parent_path().parent_path().parent_path().filename() == "profiles") {
        files.push_back(it->path());
      }
    }
    if (ec) throw UsageError(cat("--gather: ", folder, ": ", ec.message()));
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    throw UsageError("--gather: no profiles/<model>/<gpu>/profile.json under the folders given");
  }
  Json merged;
  std::string first;
  for (const fs::path& file : files) {
    Json profile;
    try {
      std::ifstream in(file);
      profile = Json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(cat("--gather: ", file.string(), ": not JSON: ", e.what()));
    }
    if (!profile.is_object() || profile.value("format", std::string()) != kModelProfileFormat) {
      throw UsageError(
          cat("--gather: ", file.string(), " is not a model profile (format \"", kModelProfileFormat, "\")"));
    }
    if (merged.is_null()) {
      merged = new_model_profile(profile.at("model"), profile.value("parameters", int64_t(0)), profile.at("gpu"),
                                 profile.at("code_version"));
      first = file.string();
    }
    for (const char* key : {"model", "gpu", "code_version"}) {
      if (profile.at(key) != merged.at(key)) {
        throw UsageError(cat("--gather: ", file.string(), " is of ", key, " ", profile.at(key).dump(), ", ", first,
                             " of ", merged.at(key).dump(), ": profiles of one ", key,
                             " only are merged (gather the others apart)"));
      }
    }
    const Json& machines = profile.at("machines");
    const Json& entries = profile.at("entries");
    for (const Json& entry : entries) {  // each with its run's machine
      const auto machine =
          std::find_if(machines.begin(), machines.end(), [&](const Json& m) { return m.at("run") == entry.at("run"); });
      if (machine == machines.end()) {
        throw UsageError(cat("--gather: ", file.string(), ": an entry of run ", entry.at("run").dump(),
                             " has no machine of that run"));
      }
      add_to_profile(merged, *machine, entry);
    }
    for (const Json& m : machines) {  // (a run whose configurations all failed has a machine and no entry)
      const bool known = std::any_of(merged["machines"].begin(), merged["machines"].end(),
                                     [&](const Json& k) { return k.at("run") == m.at("run"); });
      if (!known) merged["machines"].push_back(m);
    }
  }
  return merged;
}

}  // namespace zb
