// The cluster a plan is for (`plan --cluster cluster.json`, or flags): its GPU type, how many GPUs a node has and
// how many nodes, the links within and between nodes, and each node's host memory, cores and NVMe. A JSON object
// of these keys (every one optional; what the flags give wins over the file):
//   {"gpu": "NVIDIA H100 80GB HBM3", "gpus_per_node": 8, "nodes": 8, "gpu_memory_gb": 80,
//    "intra_node_gbps": 350, "intra_node_latency_us": 5, "inter_node_gbps": 50, "inter_node_latency_us": 10,
//    "host_memory_gb": 2000, "host_cores": 128, "nvme_read_gbps": 6, "nvme_write_gbps": 4}
// Bandwidths are per GPU in 1e9 bytes a second: intra-node is the all-reduce bus bandwidth (NCCL's definition) of
// one node's GPUs, inter-node what one GPU's share of the node's network carries (400 Gb/s a GPU is 50). What is
// left out of the node's figures is taken from the profile's machine (what was measured there); the inter-node
// figures must be given for more than one node.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace zb {

struct ClusterSpec {
  std::string gpu;                   // empty: the profile's
  int gpus_per_node = 0, nodes = 0;  // 0: not given (nodes then 1)
  std::optional<double> gpu_memory_gb;
  std::optional<double> intra_node_gbps, intra_node_latency_us;
  std::optional<double> inter_node_gbps, inter_node_latency_us;
  std::optional<double> host_memory_gb, host_cores;
  std::optional<double> nvme_read_gbps, nvme_write_gbps;
  int node_count() const { return nodes > 0 ? nodes : 1; }
  int gpus() const { return gpus_per_node * node_count(); }
};

// The largest node and cluster a plan takes.
inline constexpr int kMaxGpusPerNode = 1024, kMaxNodes = 65536;

// Throws UsageError for a figure given out of range (sizes and rates not above 0, latencies below 0, either not
// finite), naming it as `name` of its key does ("--cluster c.json: inter_node_gbps", "--inter-node-gbps").
void check_cluster_figures(const ClusterSpec& cluster, const std::function<std::string(const std::string& key)>& name);

// Reads a cluster file; throws UsageError naming `source` and the key for an unknown key, a wrong type or a value
// out of range (counts 1 to kMaxGpusPerNode or kMaxNodes, the figures as check_cluster_figures checks them).
ClusterSpec parse_cluster_spec(const nlohmann::json& json, const std::string& source);
ClusterSpec read_cluster_spec(const std::string& path);

// `over` where it sets a field, else `base`.
ClusterSpec merge(const ClusterSpec& base, const ClusterSpec& over);

// Throws UsageError when the spec cannot be planned for: no GPUs per node, or several nodes without the inter-node
// bandwidth and latency ("a plan over 8 nodes needs the network between them: --inter-node-gbps and
// --inter-node-latency-us, or inter_node_gbps and inter_node_latency_us in --cluster").
void check_plannable(const ClusterSpec& cluster);

nlohmann::ordered_json to_json(const ClusterSpec& cluster);

}  // namespace zb
