#include "bench/cluster_spec.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "bench/json_file.h"
#include "core/errors.h"
#include "core/strings.h"

namespace zb {

namespace {

// Every figure of a cluster (its counts and GPU name aside), in the order the JSON has them.
struct Figure {
  const char* key;
  std::optional<double> ClusterSpec::*field;
  bool latency;  // at least 0; the others above 0
};
constexpr Figure kFigures[] = {{"gpu_memory_gb", &ClusterSpec::gpu_memory_gb, false},
                               {"intra_node_gbps", &ClusterSpec::intra_node_gbps, false},
                               {"intra_node_latency_us", &ClusterSpec::intra_node_latency_us, true},
                               {"inter_node_gbps", &ClusterSpec::inter_node_gbps, false},
                               {"inter_node_latency_us", &ClusterSpec::inter_node_latency_us, true},
                               {"host_memory_gb", &ClusterSpec::host_memory_gb, false},
                               {"host_cores", &ClusterSpec::host_cores, false},
                               {"nvme_read_gbps", &ClusterSpec::nvme_read_gbps, false},
                               {"nvme_write_gbps", &ClusterSpec::nvme_write_gbps, false}};

int count(const nlohmann::json& value, const std::string& where, int most) {
  if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > most) {
    throw UsageError(cat(where, " must be a whole number from 1 to ", most, ", not ", value.dump()));
  }
  return int(value.get<int64_t>());
}

}  // namespace

void check_cluster_figures(const ClusterSpec& c, const std::function<std::string(const std::string& key)>& name) {
  for (const Figure& f : kFigures) {
    const std::optional<double>& v = c.*f.field;
    if (v && !(std::isfinite(*v) && (f.latency ? *v >= 0 : *v > 0))) {
      throw UsageError(cat(name(f.key), " must be ", f.latency ? "at least 0" : "above 0", ", not ", *v));
    }
  }
}

ClusterSpec parse_cluster_spec(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) throw UsageError(cat(source, ": a cluster is a JSON object of its figures"));
  ClusterSpec c;
  for (const auto& [key, value] : json.items()) {
    const std::string where = cat(source, ": ", key);
    const Figure* figure =
        std::find_if(std::begin(kFigures), std::end(kFigures), [&](const Figure& f) { return key == f.key; });
    if (key == "gpu") {
      if (!value.is_string()) throw UsageError(cat(where, " must be a string (the GPU's name as a profile has it)"));
      c.gpu = value.get<std::string>();
    } else if (key == "gpus_per_node") {
      c.gpus_per_node = count(value, where, kMaxGpusPerNode);
    } else if (key == "nodes") {
      c.nodes = count(value, where, kMaxNodes);
    } else if (figure != std::end(kFigures)) {
      if (!value.is_number()) throw UsageError(cat(where, " must be a number, not ", value.dump()));
      c.*figure->field = value.get<double>();
    } else {
      throw UsageError(cat(where,
                           ": unknown key; a cluster has gpu, gpus_per_node, nodes, gpu_memory_gb, "
                           "intra_node_gbps, intra_node_latency_us, inter_node_gbps, inter_node_latency_us, "
                           "host_memory_gb, host_cores, nvme_read_gbps and nvme_write_gbps"));
    }
  }
  check_cluster_figures(c, [&](const std::string& key) { return cat(source, ": ", key); });
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
  for (const Figure& f : kFigures)
    if (over.*f.field) c.*f.field = over.*f.field;
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
  nlohmann::ordered_json j{{"gpu", c.gpu}, {"gpus_per_node", c.gpus_per_node}, {"nodes", c.node_count()}};
  for (const Figure& f : kFigures) j[f.key] = c.*f.field ? nlohmann::ordered_json(*(c.*f.field)) : nullptr;
  return j;
}

}  // namespace zb
