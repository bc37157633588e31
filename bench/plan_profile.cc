#include "bench/plan_profile.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "bench/json_file.h"
#include "bench/model_profile.h"
#include "core/errors.h"
#include "core/strings.h"

namespace zb {

namespace {

using Json = nlohmann::json;

std::optional<double> optional_number(const Json& object, const char* key) {
  if (!object.contains(key) || !object.at(key).is_number()) return std::nullopt;
  return object.at(key).get<double>();
}

double number_or_zero(const Json& object, const char* key) { return optional_number(object, key).value_or(0); }

void add_bytes(std::map<std::string, double>& into, const Json& by_kind) {
  for (const auto& [kind, bytes] : by_kind.items())
    if (bytes.is_number()) into[kind] += bytes.get<double>();
}

ProfiledEntry entry_of(const Json& e) {
  ProfiledEntry entry;
  const Json& c = e.at("configuration");
  ProfiledConfiguration& p = entry.configuration;
  p.micro_batch = c.at("micro_batch").get<int64_t>();
  p.seq_length = c.at("seq_length").get<int64_t>();
  p.grad_accum = c.at("grad_accum").get<int64_t>();
  p.world_size = c.at("world_size").get<int>();
  p.stage = c.at("stage").get<int>();
  p.strategy = c.at("strategy").get<std::string>();
  p.dtype = c.at("dtype").get<std::string>();
  p.optimizer = c.at("optimizer").get<std::string>();
  p.activation_checkpointing = c.at("activation_checkpointing").get<std::string>();
  p.lora_rank = c.value("lora_rank", int64_t(0));
  if (p.micro_batch < 1 || p.seq_length < 1 || p.grad_accum < 1 || p.world_size < 1 || p.stage < 0 || p.stage > 3) {
    throw std::invalid_argument(cat("an entry's configuration out of range: ", c.dump()));
  }
  entry.step_ms = number_or_zero(e, "step_ms");
  for (const Json& unit : e.at("units")) {
    entry.forward_ms += number_or_zero(unit, "forward_ms");
    entry.backward_ms += number_or_zero(unit, "backward_ms");
    add_bytes(entry.collective_bytes, unit.at("collective_bytes_per_step"));
  }
  add_bytes(entry.collective_bytes, e.at("collective_bytes_outside_units_per_step"));
  const Json& o = e.at("optimizer");
  entry.gpu_optimizer_ms = number_or_zero(o, "gpu_ms");
  // The timed steps' host update where the profile has it: step_ms is theirs (profiles before it: the profiled steps').
  entry.cpu_optimizer_ms = number_or_zero(o, o.contains("timed_cpu_ms") && o["timed_cpu_ms"].is_number()
                                                 ? "timed_cpu_ms" : "cpu_ms");
  entry.gpu_parameters = number_or_zero(o, "gpu_parameters");
  entry.cpu_parameters = number_or_zero(o, "cpu_parameters");
  entry.exposed_copies_ms = number_or_zero(e.at("exposed_ms"), "copies");
  entry.other_compute_ms = number_or_zero(e, "other_compute_ms");
  const Json& memory = e.at("memory_gb");
  entry.backend_workspace_gb = number_or_zero(memory, "backend_workspace");
  entry.outside_engine_gb = number_or_zero(memory, "outside_engine");
  entry.gpu_capacity_gb = optional_number(memory, "gpu_capacity");
  return entry;
}

}  // namespace

std::optional<double> PlanProfile::bus_gbps(int ranks) const {
  std::optional<double> best;
  for (const ProfiledMachine& m : machines)
    if (m.world_size == ranks && m.collective_bus_gbps) best = std::max(best.value_or(0), *m.collective_bus_gbps);
  return best;
}

std::optional<double> PlanProfile::host_update_gparams_per_s(int ranks) const {
  // The best aggregate measured at each count of ranks updating at once.
  std::map<int, double> by_ranks;
  for (const ProfiledMachine& m : machines)
    if (m.host_optimizer_gparams_per_s && *m.host_optimizer_gparams_per_s > 0) {
      double& best = by_ranks[m.ranks_per_host];
      best = std::max(best, *m.host_optimizer_gparams_per_s * double(m.ranks_per_host));
    }
  if (by_ranks.empty()) return std::nullopt;
  auto at_or_below = by_ranks.upper_bound(ranks);
  return at_or_below == by_ranks.begin() ? at_or_below->second : std::prev(at_or_below)->second;
}

std::optional<double> PlanProfile::device_memory_gbps() const {
  std::optional<double> best;
  for (const ProfiledMachine& m : machines)
    if (m.device_memory_gbps && *m.device_memory_gbps > 0) best = std::max(best.value_or(0), *m.device_memory_gbps);
  return best;
}

std::optional<double> PlanProfile::gpu_capacity_gb() const {
  std::optional<double> most;
  for (const ProfiledEntry& e : entries)
    if (e.gpu_capacity_gb) most = std::max(most.value_or(0), *e.gpu_capacity_gb);
  return most;
}

PlanProfile parse_plan_profile(const Json& json, const std::string& source) {
  if (!json.is_object() || json.value("format", "") != kModelProfileFormat) {
    throw UsageError(cat(source, ": not a model profile (a sweep's profile.json, format \"", kModelProfileFormat,
                         "\")"));
  }
  try {
    PlanProfile p;
    p.model = json.at("model").get<std::string>();
    p.gpu = json.at("gpu").get<std::string>();
    p.code_version = json.at("code_version").get<std::string>();
    p.parameters = json.at("parameters").get<int64_t>();
    for (const Json& e : json.at("entries")) p.entries.push_back(entry_of(e));
    for (const Json& m : json.at("machines")) {
      const Json& rates = m.at("peak_rates");
      ProfiledMachine machine;
      machine.host = m.value("host", "");
      machine.world_size = rates.value("world_size", 1);
      machine.collective_bus_gbps = optional_number(rates, "collective_bus_gbps");
      machine.host_to_device_gbps = optional_number(rates, "host_to_device_gbps");
      machine.device_to_host_gbps = optional_number(rates, "device_to_host_gbps");
      machine.nvme_read_gbps = optional_number(rates, "nvme_read_gbps");
      machine.nvme_write_gbps = optional_number(rates, "nvme_write_gbps");
      machine.host_optimizer_gparams_per_s = optional_number(rates, "host_optimizer_gparams_per_s");
      machine.device_memory_gbps = optional_number(rates, "memory_gbps");
      machine.ranks_per_host = rates.value("ranks_per_host", machine.world_size);
      p.machines.push_back(machine);
    }
    return p;
  } catch (const std::exception& e) {  // (a missing or mistyped field, or one out of range)
    throw UsageError(cat(source, ": a model profile missing what a planner reads (", e.what(), ")"));
  }
}

PlanProfile read_plan_profile(const std::string& path) {
  const std::string source = cat("--profile ", path);
  return parse_plan_profile(read_json_file(path, source), source);
}

}  // namespace zb
