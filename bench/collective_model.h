// The time of a collective over the ranks of a cluster, modelled as NCCL runs it: a ring through every rank (all
// three kinds), and for an all-reduce over several nodes also a tree (chains within nodes, a binary tree between
// them), the faster of the two being what NCCL's tuner picks. Hierarchy: NCCL runs a collective on several
// channels spread over a node's NICs, each crossing the network once a node, so across nodes the bandwidth is the
// slower of the node's bus and the node's network (every GPU's share together: nccl-tests across nodes reach about
// the sum of a node's NICs), and each ring step waits the slower link's latency; a tree's bandwidth term carries the
// whole buffer up and down once, its latency only a chain and log2(nodes) network hops.
//
// Bandwidths follow NCCL's bus-bandwidth convention (nccl-tests): for a buffer of S bytes on N ranks, a ring
// all-reduce moves 2(N-1)/N S through each rank's link, a reduce-scatter or all-gather (S the whole buffer) (N-1)/N
// S. The node's bus bandwidth is the all-reduce bus bandwidth measured among its GPUs (PeakRates), which already
// holds NCCL's protocol and kernel overheads at large sizes.
#pragma once

#include <string>

namespace zb {

enum class CollectiveKind { all_reduce, reduce_scatter, all_gather };
const char* collective_kind_name(CollectiveKind kind);  // "all_reduce", ...

struct CollectiveLinks {
  int gpus_per_node = 1, nodes = 1;
  double intra_node_gbps = 0, intra_node_latency_us = 0;  // bus bandwidth among a node's GPUs, per GPU
  double inter_node_gbps = 0, inter_node_latency_us = 0;  // each GPU's share of the network (unused on one node)
  int ranks() const { return gpus_per_node * nodes; }
};

struct CollectiveTime {
  double ms = 0;
  const char* algorithm = "none";  // "ring", "tree", or "none" with one rank
  const char* link = "none";       // the link that bounds it: "intra-node" or "inter-node"
};

// A collective of `bytes` (the whole buffer: an all-gather's output, a reduce-scatter's input) over every rank.
CollectiveTime collective_time(CollectiveKind kind, double bytes, const CollectiveLinks& links);

}  // namespace zb
