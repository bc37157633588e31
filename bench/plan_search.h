// The search of `plan`: every stage, offload strategy the profile measured (and none), micro-batch dividing a GPU's
// share of the global batch and checkpointing mode (those measured, and none and full) on the cluster's GPUs, each with
// its memory (the engine's own plan, engine/memory_plan.h, plus what the profile measured outside it), whether it fits
// with the headroom asked for, its predicted step time by phase (bench/step_time_model.h), its throughput and cost.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/cluster_spec.h"
#include "bench/plan_profile.h"
#include "bench/step_time_model.h"
#include "engine/memory_plan.h"
#include "engine/trainer.h"

namespace zb {

struct PlanSettings {
  ClusterSpec cluster;           // checked: check_plannable, gpu_memory_gb set
  int64_t global_batch = 0;      // samples an optimizer step, over every GPU
  TrainingOptions base;          // model, seq, dtype, optimizer, ZeRO knobs; the rest is searched
  double min_headroom_gb = 1.0;  // what must stay free on each GPU for a configuration to fit
  std::optional<double> gpu_hour_usd;
};

struct PlannedConfiguration {
  TrainingOptions options;
  int world = 1;
  MemoryPlan memory;                // the worst rank's
  double backend_workspace_gb = 0;  // in memory.peak: the profile's, for the backend's GEMM workspaces and scratch
  double outside_engine_gb = 0;     // the CUDA context and libraries, measured (not in memory.peak)
  double gpu_total_gb = 0;          // memory.peak + outside_engine_gb
  double headroom_gb = 0;           // the GPU's memory less gpu_total_gb
  bool fits = false;
  std::string why_not;  // where it does not fit, or cannot be timed
  std::optional<StepTimePrediction> time;
  double tokens_per_s = 0, tokens_per_s_per_gpu = 0;
  std::optional<double> cost_per_1000_samples_usd;
  std::string label() const;  // "stage 2, cpu_optimizer, micro-batch 4 x 8, checkpointing full"
};

// The links of the cluster: the node's bus bandwidth as given, or as the profile measured among that many GPUs
// (the nearest count it measured); latencies as given, or 5 us within a node. Throws UsageError where a node of
// several GPUs has no bus bandwidth at all.
CollectiveLinks cluster_links(const ClusterSpec& cluster, const PlanProfile& profile);

// The memory and time of `options` on `world` GPUs of the cluster (its fit, throughput and cost set).
PlannedConfiguration plan_configuration(const PlanProfile& profile, const TrainingOptions& options,
                                        const ClusterSpec& cluster, const CollectiveLinks& links,
                                        double min_headroom_gb, std::optional<double> gpu_hour_usd);

// "117.71 GB", or "3.32 MB" below 0.1 GB (a tiny model's).
std::string memory_text(double gb);

// Every configuration of the search, the fitting and timed ones first, fastest first.
std::vector<PlannedConfiguration> search_plans(const PlanProfile& profile, const PlanSettings& settings);

}  // namespace zb
