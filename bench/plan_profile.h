// A model's profile (bench/model_profile.h) as a planner reads it: each entry's configuration and the figures the
// step-time model composes (the step, the units' passes, the optimizer, the exposed times, the collectives' bytes,
// the memory the engine's plan cannot see), and each machine's peak rates by world size.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zb {

struct ProfiledConfiguration {
  int64_t micro_batch = 0, seq_length = 0, grad_accum = 1;
  int world_size = 1, stage = 0;
  std::string strategy, dtype, optimizer, activation_checkpointing;
  int64_t lora_rank = 0;
};

struct ProfiledEntry {
  ProfiledConfiguration configuration;
  double step_ms = 0;
  double forward_ms = 0, backward_ms = 0;  // the units' sums, per micro-batch
  double gpu_optimizer_ms = 0, cpu_optimizer_ms = 0;  // the host's: over the steps step_ms times, where recorded
  double gpu_parameters = 0, cpu_parameters = 0;  // updated on each by one rank
  double exposed_copies_ms = 0;                   // the step's copies that compute did not hide
  double other_compute_ms = 0;                    // compute in neither a unit's pass nor the update, a step
  std::map<std::string, double> collective_bytes;  // per step, by kind, units' and outside them together
  double backend_workspace_gb = 0, outside_engine_gb = 0;
  std::optional<double> gpu_capacity_gb;
};

struct ProfiledMachine {
  std::string host;
  int world_size = 1;
  std::optional<double> collective_bus_gbps, host_to_device_gbps, device_to_host_gbps;
  std::optional<double> device_memory_gbps;  // a copy within device memory, bytes read and written
  std::optional<double> nvme_read_gbps, nvme_write_gbps;
  std::optional<double> host_optimizer_gparams_per_s;  // a rank's, with ranks_per_host updating at once
  int ranks_per_host = 1;
};

struct PlanProfile {
  std::string model, gpu, code_version;
  int64_t parameters = 0;
  std::vector<ProfiledEntry> entries;
  std::vector<ProfiledMachine> machines;
  // The all-reduce bus bandwidth measured among `ranks` GPUs of one host (the best of the machines that measured
  // it at that size), or none.
  std::optional<double> bus_gbps(int ranks) const;
  // The parameters a second the CPU optimizers of one host updated together with `ranks` ranks at once (a
  // machine's rate a rank times its ranks, the best of the machines that measured that count), or none where no
  // machine measured it. Beyond the most ranks measured, those's: the update is bound by the host's memory
  // bandwidth, which more ranks share; below the fewest, the fewest's.
  std::optional<double> host_update_gparams_per_s(int ranks) const;
  // The device memory bandwidth the profile's machines measured (the best), or none.
  std::optional<double> device_memory_gbps() const;
  // The largest GPU memory any entry recorded.
  std::optional<double> gpu_capacity_gb() const;
};

// Reads a profile.json; throws UsageError naming `path` where it cannot be read or is not a model profile.
PlanProfile read_plan_profile(const std::string& path);
PlanProfile parse_plan_profile(const nlohmann::json& json, const std::string& source);

}  // namespace zb
