// GCC 12 reports -Wmaybe-uninitialized inside nlohmann's ordered_json iterators (a false positive of its
// inliner, in the library's header); the warning is about the header, not this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "bench/bench_record.h"

#include <algorithm>
#include <cmath>

namespace zb {

std::string BenchRecord::label() const {
  return configuration_label(stage, strategy, names_strategy, activation_checkpointing);
}

double relative_step_spread(const std::optional<double>& step_time_stddev_ms, const std::optional<double>& mean_ms) {
  if (!step_time_stddev_ms || !mean_ms || *mean_ms <= 0) return 0;
  return *step_time_stddev_ms / *mean_ms;
}

nlohmann::ordered_json to_json(const BenchRecord& r) {
  nlohmann::ordered_json j;
  auto number = [&j](const char* key, const std::optional<double>& value) {
    j[key] = value && std::isfinite(*value) ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
  };
  j["stage"] = r.stage;
  j["strategy"] = r.strategy;
  j["offload_ratio"] = r.offload_ratio;
  j["offloaded_share"] = r.offloaded_share;
  j["status"] = r.status;
  j["error"] = r.error;
  j["oom_pool"] = r.oom_pool;
  j["oom_bytes"] = r.oom_bytes ? nlohmann::ordered_json(*r.oom_bytes) : nlohmann::ordered_json(nullptr);
  j["model"] = r.model;
  j["parameters"] = r.parameters;
  j["world_size"] = r.world_size;
  j["batch_size"] = r.batch_size;
  j["seq_length"] = r.seq_length;
  j["grad_accum"] = r.grad_accum;
  j["dtype"] = r.dtype;
  j["activation_checkpointing"] = r.activation_checkpointing;
  j["optimizer"] = r.optimizer;
  j["lora"] = r.lora;
  j["lora_rank"] = r.lora_rank;
  j["trainable_parameters"] = r.trainable_parameters;
  j["frozen_parameters"] = r.frozen_parameters;
  j["repeat"] = r.repeat;
  number("avg_step_time_ms", r.avg_step_time_ms);
  number("p50_step_ms", r.p50_step_ms);
  number("p90_step_ms", r.p90_step_ms);
  number("min_step_ms", r.min_step_ms);
  number("max_step_ms", r.max_step_ms);
  number("stddev_step_ms", r.stddev_step_ms);
  number("step_time_stddev_ms", r.step_time_stddev_ms);
  number("throughput_tokens_per_sec", r.throughput_tokens_per_sec);
  number("throughput_tokens_per_sec_per_gpu", r.throughput_tokens_per_sec_per_gpu);
  number("throughput_stddev", r.throughput_stddev);
  number("samples_per_sec", r.samples_per_sec);
  number("tflops_per_gpu", r.tflops_per_gpu);
  number("mfu", r.mfu);
  number("gpu_peak_gb", r.gpu_peak_gb);
  number("gpu_allocated_gb", r.gpu_allocated_gb);
  number("gpu_capacity_gb", r.gpu_capacity_gb);
  number("device_memory_limit_gb", r.device_memory_limit_gb);
  number("device_memory_outside_gb", r.device_memory_outside_gb);
  number("parameters_gb", r.parameters_gb);
  number("gradients_gb", r.gradients_gb);
  number("optimizer_state_gb", r.optimizer_state_gb);
  number("activations_gb", r.activations_gb);
  number("workspace_gb", r.workspace_gb);
  number("predicted_parameters_gb", r.predicted_parameters_gb);
  number("predicted_gradients_gb", r.predicted_gradients_gb);
  number("predicted_optimizer_state_gb", r.predicted_optimizer_state_gb);
  number("predicted_activations_gb", r.predicted_activations_gb);
  number("predicted_workspace_gb", r.predicted_workspace_gb);
  number("predicted_gpu_peak_gb", r.predicted_gpu_peak_gb);
  number("backend_workspace_gb", r.backend_workspace_gb);
  number("gpu_outside_engine_gb", r.gpu_outside_engine_gb);
  number("cpu_memory_gb", r.cpu_memory_gb);
  number("cpu_pinned_gb", r.cpu_pinned_gb);
  number("nvme_read_gb", r.nvme_read_gb);
  number("nvme_write_gb", r.nvme_write_gb);
  number("nvme_read_gbps", r.nvme_read_gbps);
  number("nvme_write_gbps", r.nvme_write_gbps);
  number("comm_bytes_per_step", r.comm_bytes_per_step);
  number("forward_ms", r.forward_ms);
  number("backward_ms", r.backward_ms);
  number("optimizer_ms", r.optimizer_ms);
  number("exposed_comm_ms", r.exposed_comm_ms);
  number("offload_to_host_ms", r.offload_to_host_ms);
  number("offload_cpu_optimizer_ms", r.offload_cpu_optimizer_ms);
  number("offload_to_device_ms", r.offload_to_device_ms);
  number("offload_wait_ms", r.offload_wait_ms);
  number("offload_speculation_kept_ms", r.offload_speculation_kept_ms);
  number("offload_speculation_discarded_ms", r.offload_speculation_discarded_ms);
  number("nvme_read_ms", r.nvme_read_ms);
  number("nvme_write_ms", r.nvme_write_ms);
  number("loss_first", r.loss_first);
  number("loss_last", r.loss_last);
  number("loss_scale", r.loss_scale);
  j["skipped_steps"] = r.skipped_steps ? nlohmann::ordered_json(*r.skipped_steps) : nlohmann::ordered_json(nullptr);
  j["profile_steps"] = r.profile_steps;
  number("exposed_compute_ms", r.exposed_compute_ms);
  number("exposed_collectives_ms", r.exposed_collectives_ms);
  number("exposed_copies_ms", r.exposed_copies_ms);
  number("exposed_cpu_optimizer_ms", r.exposed_cpu_optimizer_ms);
  number("exposed_nvme_ms", r.exposed_nvme_ms);
  number("exposed_idle_ms", r.exposed_idle_ms);
  j["profile_bottleneck"] = r.profile_bottleneck;
  number("cost_per_1000_samples_usd", r.cost_per_1000_samples_usd);
  number("efficiency", r.efficiency);
  number("rank_step_spread_pct", r.rank_step_spread_pct);
  number("rank_busy_spread_pct", r.rank_busy_spread_pct);
  j["slowest_rank"] = r.slowest_rank ? nlohmann::ordered_json(*r.slowest_rank) : nlohmann::ordered_json(nullptr);
  j["rank_spread_note"] = r.rank_spread_note;
  j["nodes"] = r.node_throughput.size();
  std::optional<double> slowest_node;
  for (const NodeThroughput& node : r.node_throughput)
    slowest_node = std::min(slowest_node.value_or(node.tokens_per_sec), node.tokens_per_sec);
  number("node_throughput_min", slowest_node);
  j["recommendation"] = r.recommendation;
  const RunEnvironment& e = r.environment;
  j["gpu_name"] = e.gpu_name;
  j["gpu_count"] = e.gpu_count;
  j["driver_version"] = e.driver_version;
  j["cuda_version"] = e.cuda_version;
  j["nccl_version"] = e.nccl_version;
  j["mpi_version"] = e.mpi_version;
  j["host_name"] = e.host_name;
  j["machine_name"] = e.machine_name;
  j["cloud_provider"] = e.cloud_provider;
  j["git_commit"] = e.git_commit;
  j["timestamp"] = e.timestamp;
  j["backend_options"] = e.backend_options;
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
  for (const NodeThroughput& node : r.node_throughput) {
    nodes.push_back({{"host", node.host}, {"ranks", node.ranks}, {"tokens_per_sec", node.tokens_per_sec}});
  }
  j["node_throughput"] = nodes;
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const RankResult& rank : r.per_rank) ranks.push_back(to_json(rank));
  j["per_rank"] = ranks;
  return j;
}

std::string records_json_text(const std::vector<BenchRecord>& records) {
  nlohmann::ordered_json array = nlohmann::ordered_json::array();
  for (const BenchRecord& r : records) array.push_back(to_json(r));
  return array.dump(2) + "\n";
}

namespace {

// RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled.
std::string csv_field(const nlohmann::ordered_json& value) {
  if (value.is_null()) return "";
  std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace

std::string to_csv(const std::vector<BenchRecord>& records) {
  std::string out;
  const nlohmann::ordered_json header = to_json(BenchRecord{});
  bool first = true;
  for (const auto& item : header.items()) {
    if (item.value().is_structured()) continue;
    if (!first) out += ',';
    out += item.key();
    first = false;
  }
  out += "\r\n";
  for (const BenchRecord& record : records) {
    first = true;
    const nlohmann::ordered_json row = to_json(record);  // (items() would not keep a temporary alive)
    for (const auto& item : row.items()) {
      if (item.value().is_structured()) continue;
      if (!first) out += ',';
      out += csv_field(item.value());
      first = false;
    }
    out += "\r\n";
  }
  return out;
}

}  // namespace zb

#pragma GCC diagnostic pop
