#include "bench/collective_model.h"

#include <algorithm>
#include <cmath>

namespace zb {

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_gather: return "all_gather";
  }
  return "?";
}

CollectiveTime collective_time(CollectiveKind kind, double bytes, const CollectiveLinks& links) {
  const int n = links.ranks();
  if (n <= 1 || bytes <= 0) return {};
  const bool across = links.nodes > 1;
  // NCCL spreads its channels over the node's NICs, each channel crossing the network once a node: the network
  // carries a collective at the node's rate, every GPU's share together. (With one GPU a node there is no node bus
  // to cross: the network alone.)
  const double network_gbps = links.inter_node_gbps * double(links.gpus_per_node);
  const bool network_bound = across && (links.gpus_per_node == 1 || network_gbps < links.intra_node_gbps);
  const double bandwidth = (network_bound ? network_gbps : links.intra_node_gbps) * 1e9;  // bytes/s
  const double step_latency_s = (!across                    ? links.intra_node_latency_us
                                 : links.gpus_per_node == 1 ? links.inter_node_latency_us
                                                            : std::max(links.inter_node_latency_us,
                                                                       links.intra_node_latency_us)) * 1e-6;
  const double rank_share = double(n - 1) / double(n);
  const double ring_steps = kind == CollectiveKind::all_reduce ? 2.0 * (n - 1) : double(n - 1);
  const double ring_factor = kind == CollectiveKind::all_reduce ? 2 * rank_share : rank_share;
  CollectiveTime ring{1e3 * (ring_factor * bytes / bandwidth + ring_steps * step_latency_s), "ring",
                      network_bound ? "inter-node" : "intra-node"};
  if (kind != CollectiveKind::all_reduce || !across) return ring;
  // Up the chain and the tree, then down again: the buffer crosses each link twice, once each way.
  const double tree_latency_s = 2 * ((links.gpus_per_node - 1) * links.intra_node_latency_us * 1e-6 +
                                     std::ceil(std::log2(double(links.nodes))) * links.inter_node_latency_us * 1e-6);
  CollectiveTime tree{1e3 * (2 * bytes / bandwidth + tree_latency_s), "tree", ring.link};
  return tree.ms < ring.ms ? tree : ring;
}

}  // namespace zb
