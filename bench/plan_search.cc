#include "bench/plan_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "bench/bench_record.h"
#include "core/errors.h"
#include "core/strings.h"
#include "engine/offload_strategy.h"

namespace zb {

namespace {

constexpr double kGB = 1e9;
constexpr double kDefaultIntraNodeLatencyUs = 5;

// The largest of the profile's measurements of `field` among its entries of this micro-batch and sequence length
// (of any, where none is of those), preferring entries of several ranks where `world` has several (NCCL's buffers).
template <typename Field>
double measured_most(const PlanProfile& profile, const TrainingOptions& o, int world, Field field) {
  const bool several = world > 1;
  const bool measured_alike = std::any_of(profile.entries.begin(), profile.entries.end(), [&](const ProfiledEntry& e) {
    return (e.configuration.world_size > 1) == several;
  });
  double most = 0, most_any = 0;
  for (const ProfiledEntry& e : profile.entries) {
    const ProfiledConfiguration& c = e.configuration;
    if (measured_alike && (c.world_size > 1) != several) continue;
    most_any = std::max(most_any, field(e));
    if (c.micro_batch == o.batch && c.seq_length == o.seq) most = std::max(most, field(e));
  }
  return most > 0 ? most : most_any;
}

}  // namespace

std::string memory_text(double gb) {
  char text[32];
  if (std::abs(gb) >= 0.1)
    std::snprintf(text, sizeof text, "%.2f GB", gb);
  else
    std::snprintf(text, sizeof text, "%.2f MB", gb * 1e3);
  return text;
}

std::string PlannedConfiguration::label() const {
  std::string text = cat("stage ", options.zero.stage, ", ", offload_spec_name(options.offload, options.offload_ratio),
                         ", micro-batch ", options.batch, " x ", options.grad_accum);
  if (options.activation_checkpointing != ActivationCheckpointing::none) {
    text += cat(", checkpointing ", activation_checkpointing_name(options.activation_checkpointing));
  }
  return text;
}

CollectiveLinks cluster_links(const ClusterSpec& cluster, const PlanProfile& profile) {
  CollectiveLinks links;
  links.gpus_per_node = cluster.gpus_per_node;
  links.nodes = cluster.node_count();
  links.intra_node_latency_us = cluster.intra_node_latency_us.value_or(kDefaultIntraNodeLatencyUs);
  if (cluster.intra_node_gbps) {
    links.intra_node_gbps = *cluster.intra_node_gbps;
  } else {
    // The measurement among the nearest number of GPUs (the larger of two as near).
    int best = 0;
    for (const ProfiledMachine& m : profile.machines) {
      if (!m.collective_bus_gbps) continue;
      const int d = std::abs(m.world_size - cluster.gpus_per_node), bd = std::abs(best - cluster.gpus_per_node);
      if (best == 0 || d < bd || (d == bd && m.world_size > best)) best = m.world_size;
    }
    if (best > 0) links.intra_node_gbps = *profile.bus_gbps(best);
  }
  if (cluster.gpus_per_node > 1 && links.intra_node_gbps <= 0) {
    throw UsageError(
        "the profile measured no collective among GPUs (a sweep on one GPU): give --intra-node-gbps, or "
        "intra_node_gbps in --cluster, or gather a profile with a sweep on several GPUs");
  }
  links.inter_node_gbps = cluster.inter_node_gbps.value_or(0);
  links.inter_node_latency_us = cluster.inter_node_latency_us.value_or(0);
  return links;
}

PlannedConfiguration plan_configuration(const PlanProfile& profile, const TrainingOptions& options,
                                        const ClusterSpec& cluster, const CollectiveLinks& links,
                                        double min_headroom_gb, std::optional<double> gpu_hour_usd) {
  PlannedConfiguration p;
  p.options = options;
  p.world = links.ranks();
  p.backend_workspace_gb =
      measured_most(profile, options, p.world, [](const ProfiledEntry& e) { return e.backend_workspace_gb; });
  p.outside_engine_gb =
      measured_most(profile, options, p.world, [](const ProfiledEntry& e) { return e.outside_engine_gb; });
  const size_t workspace = size_t(p.backend_workspace_gb * kGB);
  // Ranks hold equal shards; the first and the last are where padding and persistent units could differ.
  p.memory = plan_memory(options, 0, p.world, workspace);
  if (p.world > 1) {
    const MemoryPlan last = plan_memory(options, p.world - 1, p.world, workspace);
    if (last.peak > p.memory.peak) p.memory = last;
  }
  p.gpu_total_gb = double(p.memory.peak) / kGB + p.outside_engine_gb;
  const double capacity = cluster.gpu_memory_gb.value_or(0);
  p.headroom_gb = capacity - p.gpu_total_gb;
  p.fits = p.headroom_gb >= min_headroom_gb;
  if (!p.fits) {
    p.why_not = cat("needs ", memory_text(p.gpu_total_gb), " of the GPU's ", memory_text(capacity), " (",
                    memory_text(min_headroom_gb), " kept free)");
  }
  const double host_needed_gb = double(p.memory.host_bytes) / kGB * cluster.gpus_per_node;
  if (p.fits && cluster.host_memory_gb && host_needed_gb > *cluster.host_memory_gb) {
    p.fits = false;
    p.why_not = cat("its offload needs ", memory_text(host_needed_gb), " of host memory a node; a node has ",
                    memory_text(*cluster.host_memory_gb));
  }
  std::string why;
  p.time = predict_step_time(profile, options, links, why);
  if (!p.time) {
    if (p.why_not.empty()) p.why_not = why;
    return p;
  }
  const double tokens = double(options.batch * options.seq * options.grad_accum) * p.world;
  p.tokens_per_s = tokens / (p.time->step_ms / 1e3);
  p.tokens_per_s_per_gpu = p.tokens_per_s / p.world;
  if (gpu_hour_usd) {
    p.cost_per_1000_samples_usd =
        cost_per_1000_samples_usd(*gpu_hour_usd, p.world, p.tokens_per_s / double(options.seq));
  }
  return p;
}

std::vector<PlannedConfiguration> search_plans(const PlanProfile& profile, const PlanSettings& settings) {
  const ClusterSpec& cluster = settings.cluster;
  const CollectiveLinks links = cluster_links(cluster, profile);
  const int world = links.ranks();
  // The strategies and checkpointing modes the profile measured (a strategy that ran on several GPUs only is timed
  // from another's one-GPU run; full checkpointing is also estimated), and every micro-batch that divides a GPU's
  // share of the global batch.
  std::set<std::string> strategy_names{"none"}, checkpointing_names{"none", "full"};
  for (const ProfiledEntry& e : profile.entries) {
    strategy_names.insert(e.configuration.strategy);
    checkpointing_names.insert(e.configuration.activation_checkpointing);
  }
  std::vector<StrategySpec> strategies;
  for (const std::string& name : strategy_names) strategies.push_back(parse_strategy_spec(name));
  std::vector<ActivationCheckpointing> checkpointing;
  for (const std::string& name : checkpointing_names) checkpointing.push_back(parse_activation_checkpointing(name));
  std::vector<PlannedConfiguration> plans;
  if (settings.global_batch % world != 0) return plans;
  const int64_t per_gpu = settings.global_batch / world;
  for (int64_t micro = 1; micro <= per_gpu; ++micro) {
    if (per_gpu % micro != 0) continue;
    for (const ActivationCheckpointing ckpt : checkpointing) {
      for (int stage = 0; stage <= 3; ++stage) {
        for (const StrategySpec& spec : strategies) {
          TrainingOptions o = settings.base;
          o.batch = micro;
          o.grad_accum = per_gpu / micro;
          o.activation_checkpointing = ckpt;
          o.zero.stage = stage;
          o.offload = spec.strategy;
          o.offload_ratio = spec.ratio;
          if (o.offload != OffloadStrategy::none && stage == 0) continue;      // (DeepSpeed offloads from stage 1)
          if (o.offload == OffloadStrategy::cpu_full && stage != 3) continue;  // (parameters offload in stage 3)
          plans.push_back(
              plan_configuration(profile, o, cluster, links, settings.min_headroom_gb, settings.gpu_hour_usd));
        }
      }
    }
  }
  std::stable_sort(plans.begin(), plans.end(), [](const PlannedConfiguration& a, const PlannedConfiguration& b) {
    const bool a_ok = a.fits && a.time, b_ok = b.fits && b.time;
    if (a_ok != b_ok) return a_ok;
    return a.tokens_per_s > b.tokens_per_s;
  });
  return plans;
}

}  // namespace zb
