#include "bench/cluster_spec.h"

#include <set>

#include "bench/json_file.h"
#include "core/errors.h"
#include "core/strings.h"

namespace zb {

namespace {

double number(const nlohmann::json& value, const std::string& where, double lowest, bool inclusive) {
  if (!value.is_number()) throw UsageError(cat(where, " must be a number, not ", value.dump()));
  const double v = value.get<double>();
  if (inclusive ? v < lowest : v <= lowest) {
    throw UsageError(cat(where, " must be ", inclusive ? "at least " : "above ", lowest, ", not ", value.dump()));
  }
  return v;
}

int count(const nlohmann::json& value, const std::string& where) {
  if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 1'000'000) {
    throw UsageError(cat(where, " must be a whole number of at least 1, not ", value.dump()));
  }
  return int(value.get<int64_t>());
}

}  // namespace

ClusterSpec parse_cluster_spec(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) throw UsageError(cat(source, ": a cluster is a JSON object of its figures"));
  ClusterSpec c;
  const std::set<std::string> rates{"gpu_memory_gb",  "intra_node_gbps", "inter_node_gbps", "host_memory_gb",
                                    "host_cores",     "nvme_read_gbps",  "nvme_write_gbps"};
  const std::set<std::string> latencies{"intra_node_latency_us", "inter_node_latency_us"};
  for (const auto& [key, value] : json.items()) {
    const std::string where = cat(source, ": ", key);
    if (key == "gpu") {
      if (!value.is_string()) throw UsageError(cat(where, " must be a string (the GPU's name as a profile has it)"));
      c.gpu = value.get<std::string>();
    } else if (key == "gpus_per_node") {
      c.gpus_per_node = count(value, where);
    } else if (key == "nodes") {
      c.nodes = count(value, where);
    } else if (rates.count(key) || latencies.count(key)) {
      const double v = number(value, where, 0, latencies.count(key) > 0);
      std::optional<double>* field = key == "gpu_memory_gb"           ? &c.gpu_memory_gb
                                     : key == "intra_node_gbps"       ? &c.intra_node_gbps
                                     : key == "inter_node_gbps"       ? &c.inter_node_gbps
                                     : key == "host_memory_gb"        ? &c.host_memory_gb
                                     : key == "host_cores"            ? &c.host_cores
                                     : key == "nvme_read_gbps"        ? &c.nvme_read_gbps
                                     : key == "nvme_write_gbps"       ? &c.nvme_write_gbps
                                     : key == "intra_node_latency_us" ? &c.intra_node_latency_us
                                                                      : &c.inter_node_latency_us;
      *field = v;
    } else {
      throw UsageError(cat(where, ": unknown key; a cluster has gpu, gpus_per_node, nodes, gpu_memory_gb, "
                                  "intra_node_gbps, intra_node_latency_us, inter_node_gbps, inter_node_latency_us, "
                                  "host_memory_gb, host_cores, nvme_read_gbps and nvme_write_gbps"));
    }
  }
  return c;
}

ClusterSpec read_cluster_spec(const std::string& path) {
  const std::string source = cat("--cluster ", path);
  return parse_cluster_spec(read_json_file(path, source), source);
}

ClusterSpec merge(const ClusterSpec& base, const ClusterSpec& over) {
  ClusterSpec c = base;
  if (!over.gpu.empty()) c.gpu = over.gpu;
  if (over.gpus_per_node > 0) c.gpus_per_node = over.gpus_per_node;
  if (over.nodes > 0) c.nodes = over.nodes;
  auto take = [](std::optional<double>& into, const std::optional<double>& from) {
    if (from) into = from;
  };
  take(c.gpu_memory_gb, over.gpu_memory_gb);
  take(c.intra_node_gbps, over.intra_node_gbps);
  take(c.intra_node_latency_us, over.intra_node_latency_us);
  take(c.inter_node_gbps, over.inter_node_gbps);
  take(c.inter_node_latency_us, over.inter_node_latency_us);
  take(c.host_memory_gb, over.host_memory_gb);
  take(c.host_cores, over.host_cores);
  take(c.nvme_read_gbps, over.nvme_read_gbps);
  take(c.nvme_write_gbps, over.nvme_write_gbps);
  return c;
}

void check_plannable(const ClusterSpec& cluster) {
  if (cluster.gpus_per_node < 1) {
    throw UsageError("a plan needs the GPUs of a node: --gpus-per-node, or gpus_per_node in --cluster");
  }
  if (cluster.node_count() > 1 && (!cluster.inter_node_gbps || !cluster.inter_node_latency_us)) {
    throw UsageError(cat("a plan over ", cluster.nodes,
                         " nodes needs the network between them: --inter-node-gbps and --inter-node-latency-us, or "
                         "inter_node_gbps and inter_node_latency_us in --cluster"));
  }
}

nlohmann::ordered_json to_json(const ClusterSpec& c) {
  auto optional = [](const std::optional<double>& v) { return v ? nlohmann::ordered_json(*v) : nullptr; };
  return {{"gpu", c.gpu},
          {"gpus_per_node", c.gpus_per_node},
          {"nodes", c.node_count()},
          {"gpu_memory_gb", optional(c.gpu_memory_gb)},
          {"intra_node_gbps", optional(c.intra_node_gbps)},
          {"intra_node_latency_us", optional(c.intra_node_latency_us)},
          {"inter_node_gbps", optional(c.inter_node_gbps)},
          {"inter_node_latency_us", optional(c.inter_node_latency_us)},
          {"host_memory_gb", optional(c.host_memory_gb)},
          {"host_cores", optional(c.host_cores)},
          {"nvme_read_gbps", optional(c.nvme_read_gbps)},
          {"nvme_write_gbps", optional(c.nvme_write_gbps)}};
}

}  // namespace zb
