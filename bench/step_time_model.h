// The step time of a configuration on a cluster, composed from a model's profile measured on one GPU
// (bench/plan_profile.h) and the links between GPUs (bench/collective_model.h).
//
// The basis is the profile's one-GPU entry of the same dtype, optimizer, sequence length, checkpointing mode and
// offload strategy (the nearest stage measured, the lower of two as near; the nearest micro-batch; the median where
// several hosts measured it). Its step, less its device optimizer, its host optimizer and (without offload) the
// copies compute did not hide, is the work of its micro-batches, scaled to the configuration's micro-batch
// (linearly in tokens) and accumulation, and for another model of the profile's family (same norm, positions and
// MLP: Llama-2-70b from Llama-2-7b's profile) by the ratio of their work a token (training_flops_per_token), the
// GEMMs of a larger model being at least as efficient. To that the configuration adds:
// - the device optimizer over this rank's share of the parameters, at the basis's time a parameter (where the
//   profile ran no update on the device, its bytes at the device memory bandwidth measured);
// - the host optimizer (offload) over this rank's share, at the basis's time a parameter, or where longer, as the
//   host's memory bounds it: the node's ranks each updating and copying their shares, the bytes at the best
//   aggregate rate the profile's machines measured (PlanProfile::host_update_gparams_per_s, in
//   kMeasuredHostUpdateBytesPerParameter a parameter); without that measurement, one rank's rate shared among the
//   node's ranks (an upper bound). The basis's copies that its units' compute did not hide shrink with the rank's
//   share of the parameters; the units' compute its host update hid is paid where this update is shorter;
// - the collectives the stage issues (bytes below), each timed as NCCL runs it; they run beside compute, which
//   loses kCollectiveContention of their time (NCCL's kernels take SMs and memory bandwidth from it), or where they
//   outlast the compute, all but its length: the step pays the larger of that and the one-GPU copies they replace.
//   With offload the part of the host update no compute runs beside covers the weights' gathers: only what
//   outlasts it counts.
// Collective bytes a step, with Psi the trained weights' bytes and Phi all weights' (the dtype's size), a micro-
// batches: stage 0 all-reduces Psi once; stage 1 reduce-scatters Psi once and all-gathers Psi after the update;
// stage 2 reduce-scatters Psi each micro-batch and all-gathers Psi; stage 3 all-gathers Phi in forward and again
// in backward (less what its slots keep: the basis's own gather bytes tell how much) and reduce-scatters Psi, each
// micro-batch. Full activation checkpointing without a measured basis adds one forward to each backward.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/collective_model.h"
#include "bench/plan_profile.h"
#include "engine/trainer.h"

namespace zb {

// The share of a collective's time that the compute beside it loses.
inline constexpr double kCollectiveContention = 0.6;

struct CollectiveEstimate {
  CollectiveKind kind = CollectiveKind::all_reduce;
  double bytes = 0;  // a step, this rank's buffers
  CollectiveTime time;
};

struct StepTimePrediction {
  double step_ms = 0;
  // The phases: the micro-batches' compute; the device's update; the host's update; the copies the one-GPU basis
  // exposed; what the collectives cost the step.
  double compute_ms = 0, optimizer_ms = 0, cpu_optimizer_ms = 0, copies_ms = 0, collectives_ms = 0;
  std::vector<CollectiveEstimate> collectives;
  std::string basis;  // which measurement it starts from, and what was estimated
};

// nullopt, and `why` saying what the profile lacks, where it has no one-GPU basis for the configuration.
std::optional<StepTimePrediction> predict_step_time(const PlanProfile& profile, const TrainingOptions& options,
                                                    const CollectiveLinks& links, std::string& why);

}  // namespace zb
