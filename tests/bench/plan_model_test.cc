// The planner's models on their own: the collective times (NCCL's ring and tree, bounded by the slower link), the
// cluster file, and the step-time composition from a profile's one-GPU entries.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/cluster_spec.h"
#include "bench/collective_model.h"
#include "bench/step_time_model.h"
#include "core/errors.h"
#include "engine/parameter_store.h"
#include "models/model_registry.h"
#include "models/parameter_layout.h"

namespace zb {
namespace {

TEST(CollectiveModel, RingTimesFollowNcclsBusBandwidth) {
  CollectiveLinks node{4, 1, 100, 0, 0, 0};  // 100 GB/s bus, no latency
  const double bytes = 1e9;
  // all-reduce: 2(n-1)/n of the buffer through each link; reduce-scatter and all-gather (n-1)/n.
  EXPECT_NEAR(collective_time(CollectiveKind::all_reduce, bytes, node).ms, 1e3 * 2 * 0.75 * bytes / 100e9, 1e-9);
  EXPECT_NEAR(collective_time(CollectiveKind::all_gather, bytes, node).ms, 1e3 * 0.75 * bytes / 100e9, 1e-9);
  EXPECT_NEAR(collective_time(CollectiveKind::reduce_scatter, bytes, node).ms, 1e3 * 0.75 * bytes / 100e9, 1e-9);
  EXPECT_STREQ(collective_time(CollectiveKind::all_gather, bytes, node).link, "intra-node");
  // Latency: a step of the ring each.
  node.intra_node_latency_us = 10;
  EXPECT_NEAR(collective_time(CollectiveKind::all_gather, bytes, node).ms, 1e3 * 0.75 * bytes / 100e9 + 3 * 0.01, 1e-9);
  // One rank: nothing to do.
  EXPECT_EQ(collective_time(CollectiveKind::all_reduce, bytes, CollectiveLinks{1, 1, 100, 0, 0, 0}).ms, 0);
}

TEST(CollectiveModel, AcrossNodesTheNetworkBoundsTheRingAndTheTreeWinsSmallBuffers) {
  // 512 ranks, 25 GB/s a GPU between nodes: 200 GB/s a node, below its 300 GB/s bus.
  const CollectiveLinks cluster{8, 64, 300, 5, 25, 10};
  const double big = 4e9;
  const CollectiveTime ring = collective_time(CollectiveKind::all_gather, big, cluster);
  EXPECT_STREQ(ring.algorithm, "ring");
  EXPECT_STREQ(ring.link, "inter-node");
  EXPECT_NEAR(ring.ms, 1e3 * (511.0 / 512 * big / 200e9 + 511 * 10e-6), 1e-9);
  // On 4 nodes a large all-reduce goes round the ring (about half the tree's bytes a link); on 64 its 2 x 511 steps'
  // latency tips it to the tree. A small one goes up and down the tree (2 x 7 chain steps and 2 x log2(64) network
  // hops).
  EXPECT_STREQ(collective_time(CollectiveKind::all_reduce, big, CollectiveLinks{8, 4, 300, 5, 25, 10}).algorithm,
               "ring");
  EXPECT_STREQ(collective_time(CollectiveKind::all_reduce, big, cluster).algorithm, "tree");
  const CollectiveTime small = collective_time(CollectiveKind::all_reduce, 1e6, cluster);
  EXPECT_STREQ(small.algorithm, "tree");
  EXPECT_NEAR(small.ms, 1e3 * (2 * 1e6 / 200e9 + 2 * (7 * 5e-6 + 6 * 10e-6)), 1e-9);
  // One GPU a node: the network alone, its latency each step.
  const CollectiveTime lone = collective_time(CollectiveKind::all_gather, big, CollectiveLinks{1, 4, 0, 0, 50, 10});
  EXPECT_STREQ(lone.link, "inter-node");
  EXPECT_NEAR(lone.ms, 1e3 * (0.75 * big / 50e9 + 3 * 10e-6), 1e-9);
  // A network faster than the node's bus leaves the node's bus the bound: 8 GPUs at 50 GB/s each are 400 GB/s.
  const CollectiveTime fast = collective_time(CollectiveKind::all_gather, big, CollectiveLinks{8, 2, 300, 5, 50, 10});
  EXPECT_STREQ(fast.link, "intra-node");
  EXPECT_NEAR(fast.ms, 1e3 * (15.0 / 16 * big / 300e9 + 15 * 10e-6), 1e-9);
}

TEST(ClusterSpec, ReadsEveryFigureAndRefusesWhatItDoesNotKnow) {
  const ClusterSpec c = parse_cluster_spec(
      nlohmann::json::parse(R"({"gpu": "NVIDIA H100 80GB HBM3", "gpus_per_node": 8, "nodes": 4, "gpu_memory_gb": 80,
          "inter_node_gbps": 50, "inter_node_latency_us": 8, "host_memory_gb": 2000})"),
      "test");
  EXPECT_EQ(c.gpus(), 32);
  EXPECT_EQ(*c.inter_node_gbps, 50);
  EXPECT_NO_THROW(check_plannable(c));
  EXPECT_THROW(parse_cluster_spec(nlohmann::json::parse(R"({"gpus": 8})"), "test"), UsageError);
  EXPECT_THROW(parse_cluster_spec(nlohmann::json::parse(R"({"nodes": 0})"), "test"), UsageError);
  EXPECT_THROW(parse_cluster_spec(nlohmann::json::parse(R"({"inter_node_gbps": -1})"), "test"), UsageError);
  EXPECT_THROW(parse_cluster_spec(nlohmann::json::parse(R"({"gpu_memory_gb": "80"})"), "test"), UsageError);
  // Several nodes need the network between them.
  ClusterSpec no_network = c;
  no_network.inter_node_gbps.reset();
  try {
    check_plannable(no_network);
    FAIL() << "planned 4 nodes without the network";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--inter-node-gbps"), std::string::npos) << e.what();
  }
  // The flags win over the file.
  ClusterSpec flags;
  flags.nodes = 2;
  flags.inter_node_gbps = 25;
  const ClusterSpec merged = merge(c, flags);
  EXPECT_EQ(merged.nodes, 2);
  EXPECT_EQ(merged.gpus_per_node, 8);
  EXPECT_EQ(*merged.inter_node_gbps, 25);
}

// A profile of gpt2-tiny with one-GPU entries of stages 0 and 3 (no offload) and stage 1 with cpu_optimizer.
PlanProfile tiny_profile() {
  PlanProfile p;
  p.model = "gpt2-tiny";
  const double params = double(ParameterLayout(resolve_model("gpt2-tiny")).trainable_numel());
  auto entry = [&](int stage, const std::string& strategy, int64_t micro, double step, double gpu_ms, double cpu_ms,
                   double copies) {
    ProfiledEntry e;
    e.configuration = {micro, 64, 1, 1, stage, strategy, "fp32", "adamw", "none", 0};
    e.step_ms = step;
    e.forward_ms = 0.3 * (step - gpu_ms - cpu_ms);
    e.gpu_optimizer_ms = gpu_ms;
    e.cpu_optimizer_ms = cpu_ms;
    (strategy == "none" ? e.gpu_parameters : e.cpu_parameters) = params;
    e.exposed_copies_ms = copies;
    if (stage == 3) e.collective_bytes["all_gather"] = 1.5 * params * 4;  // backward regathers half
    return e;
  };
  p.entries = {entry(0, "none", 4, 100, 10, 0, 0), entry(3, "none", 4, 110, 10, 0, 6),
               entry(1, "cpu_optimizer", 4, 300, 0, 250, 40)};
  ProfiledMachine node;
  node.world_size = 2;
  node.collective_bus_gbps = 0.001;  // 1 MB/s: collectives dominate
  p.machines = {node};
  return p;
}

TrainingOptions tiny_options(int stage, OffloadStrategy offload = OffloadStrategy::none) {
  TrainingOptions o;
  o.model = resolve_model("gpt2-tiny");
  o.batch = 4;
  o.seq = 64;
  o.zero.stage = stage;
  o.offload = offload;
  return o;
}

TEST(StepTimeModel, OneGpuGivesItsBasisBack) {
  const PlanProfile profile = tiny_profile();
  std::string why;
  const CollectiveLinks one{1, 1, 0, 0, 0, 0};
  EXPECT_DOUBLE_EQ(predict_step_time(profile, tiny_options(0), one, why)->step_ms, 100);
  EXPECT_DOUBLE_EQ(predict_step_time(profile, tiny_options(3), one, why)->step_ms, 110);
  EXPECT_DOUBLE_EQ(predict_step_time(profile, tiny_options(1, OffloadStrategy::cpu_optimizer), one, why)->step_ms, 300);
  // Stage 2 has no entry of its own: the nearest stage measured (3) is its basis; stage 1's is the nearer of two as
  // near.
  EXPECT_DOUBLE_EQ(predict_step_time(profile, tiny_options(2), one, why)->step_ms, 110);
  EXPECT_DOUBLE_EQ(predict_step_time(profile, tiny_options(1), one, why)->step_ms, 100);
}

TEST(StepTimeModel, ScalesWithTokensAndAddsTheStagesCollectives) {
  const PlanProfile profile = tiny_profile();
  std::string why;
  const CollectiveLinks one{1, 1, 0, 0, 0, 0};
  TrainingOptions o = tiny_options(0);
  o.batch = 8;
  o.grad_accum = 3;
  // Compute doubles with the micro-batch and triples with accumulation; the update does not.
  EXPECT_DOUBLE_EQ(predict_step_time(profile, o, one, why)->step_ms, 90 * 2 * 3 + 10);
  // Two GPUs at 1 MB/s: stage 0 all-reduces the trained weights once, 2(n-1)/n of them through each link.
  const CollectiveLinks two{2, 1, 0.001, 0, 0, 0};
  const double psi = double(ParameterLayout(o.model).trainable_numel()) * 4;
  const StepTimePrediction p0 = *predict_step_time(profile, tiny_options(0), two, why);
  ASSERT_EQ(p0.collectives.size(), 1u);
  EXPECT_EQ(p0.collectives[0].kind, CollectiveKind::all_reduce);
  EXPECT_DOUBLE_EQ(p0.collectives[0].bytes, psi);
  // At 1 MB/s the all-reduce outlasts the compute beside it: the step pays it whole (the compute hidden under it).
  EXPECT_NEAR(p0.step_ms, 10 + 1e3 * psi / 1e6, 1e-6);
  // At 1 GB/s it is short beside the compute, which loses kCollectiveContention of its time.
  const StepTimePrediction fast0 = *predict_step_time(profile, tiny_options(0), CollectiveLinks{2, 1, 1, 0, 0, 0}, why);
  EXPECT_NEAR(fast0.step_ms, 90 + 10 + kCollectiveContention * 1e3 * psi / 1e9, 1e-9);
  // Stage 3: gathers as the basis measured (1.5 x the weights a micro-batch), reduce-scatter of the gradients, and
  // the update of half the parameters; the one-GPU copies are what the collectives replace.
  const StepTimePrediction p3 = *predict_step_time(profile, tiny_options(3), two, why);
  ASSERT_EQ(p3.collectives.size(), 2u);
  EXPECT_NEAR(p3.collectives[0].bytes, 1.5 * psi, 1e-6 * psi);
  EXPECT_DOUBLE_EQ(p3.collectives[1].bytes, psi);
  EXPECT_DOUBLE_EQ(p3.optimizer_ms, 5);
  EXPECT_NEAR(p3.step_ms, 5 + 1e3 * (0.5 * 2.5 * psi) / 1e6, 1e-6);  // (the collectives outlast the compute, 94)
}

TEST(StepTimeModel, OffloadSharesTheHostAmongItsRanks) {
  const PlanProfile profile = tiny_profile();
  std::string why;
  // The one-GPU basis: step 300 = host update 250 + units 15 + exposed copies 35 (of its 40 measured).
  // Two ranks on one host update half the parameters each, at half the rate one rank had (no host rate measured),
  // and copy half the gradients and weights.
  const StepTimePrediction p = *predict_step_time(profile, tiny_options(1, OffloadStrategy::cpu_optimizer),
                                                  CollectiveLinks{2, 1, 1, 0, 0, 0}, why);
  EXPECT_DOUBLE_EQ(p.cpu_optimizer_ms, 250);
  EXPECT_DOUBLE_EQ(p.compute_ms, 15);
  EXPECT_DOUBLE_EQ(p.copies_ms, 35.0 / 2);
  // The reduce-scatter runs in backward, before the host update; the all-gather of the new weights beside it.
  ASSERT_EQ(p.collectives.size(), 2u);
  ASSERT_EQ(p.collectives[0].kind, CollectiveKind::reduce_scatter);
  EXPECT_NEAR(p.step_ms, 15 + 17.5 + 250 + kCollectiveContention * p.collectives[0].time.ms, 1e-9);
  // At 0.2 MB/s the collectives outlast the compute beside them (15 ms) and the gather the host update beside it: the
  // step pays the rest.
  const StepTimePrediction slow = *predict_step_time(profile, tiny_options(1, OffloadStrategy::cpu_optimizer),
                                                     CollectiveLinks{2, 1, 0.0002, 0, 0, 0}, why);
  const double reduce_ms = slow.collectives[0].time.ms, gather_ms = slow.collectives[1].time.ms;
  EXPECT_GT(kCollectiveContention * gather_ms, 250);
  EXPECT_NEAR(slow.collectives_ms, (reduce_ms - 15) + (gather_ms - 15 - 250), 1e-9);
  EXPECT_NEAR(slow.step_ms, 15 + 17.5 + 250 + slow.collectives_ms, 1e-9);
  // On two hosts of one GPU each, each host updates half.
  const StepTimePrediction apart = *predict_step_time(profile, tiny_options(1, OffloadStrategy::cpu_optimizer),
                                                      CollectiveLinks{1, 2, 1, 0, 1, 0}, why);
  EXPECT_DOUBLE_EQ(apart.cpu_optimizer_ms, 125);
  // Where the profile measured the host's CPU optimizer, the node's update is bound by the aggregate rate measured
  // with its ranks (here one rank at 1.5 r, two at r each; beyond two, two's): the node's parameters, each moving
  // the update's bytes (fp32 master and moments both ways, the fp32 gradient in: 28) and copied both ways (8), in
  // the measurement's 28 a parameter.
  const double params = double(ParameterLayout(resolve_model("gpt2-tiny")).trainable_numel());
  const double bytes = 2 * (4 + 8) + 4 + 2 * 4;
  const double r = params * bytes / 28 / (2 * 1e6 * 500);  // (1e9 parameters a second: a ceiling of 500 ms)
  PlanProfile measured = profile;
  ProfiledMachine alone, shared;
  alone.host_optimizer_gparams_per_s = 1.5 * r;
  shared.world_size = shared.ranks_per_host = 2;
  shared.host_optimizer_gparams_per_s = r;
  measured.machines.insert(measured.machines.end(), {alone, shared});
  EXPECT_NEAR(measured.host_update_gparams_per_s(1).value_or(0), 1.5 * r, 1e-15);
  for (int ranks : {2, 3, 8}) EXPECT_NEAR(measured.host_update_gparams_per_s(ranks).value_or(0), 2 * r, 1e-15);
  EXPECT_EQ(profile.host_update_gparams_per_s(2), std::nullopt);
  for (int ranks : {1, 2, 4, 8}) {
    const StepTimePrediction bound = *predict_step_time(
        measured, tiny_options(1, OffloadStrategy::cpu_optimizer), CollectiveLinks{ranks, 1, 1, 0, 0, 0}, why);
    EXPECT_NEAR(bound.cpu_optimizer_ms, ranks == 1 ? 500 * 2 / 1.5 : 500, 1e-9) << ranks << " ranks share the host";
    EXPECT_NE(bound.basis.find("bound by its memory"), std::string::npos) << bound.basis;
  }
  // A faster host leaves each rank its share at the basis's rate.
  ProfiledMachine fast = shared;
  fast.host_optimizer_gparams_per_s = 100 * r;
  measured.machines.push_back(fast);
  const StepTimePrediction unbound = *predict_step_time(measured, tiny_options(1, OffloadStrategy::cpu_optimizer),
                                                        CollectiveLinks{2, 1, 1, 0, 0, 0}, why);
  EXPECT_DOUBLE_EQ(unbound.cpu_optimizer_ms, 125);
  EXPECT_EQ(unbound.basis.find("bound by its memory"), std::string::npos) << unbound.basis;
  // A basis whose host update hid 50 ms of its units' 100 (step 300 = update 250 + 50): on 100 nodes of one GPU the
  // update takes 2.5 ms and hides only that.
  PlanProfile hiding = profile;
  hiding.entries.back().forward_ms = 100;
  const StepTimePrediction spread = *predict_step_time(hiding, tiny_options(1, OffloadStrategy::cpu_optimizer),
                                                       CollectiveLinks{1, 100, 1, 0, 1e9, 0}, why);
  EXPECT_DOUBLE_EQ(spread.cpu_optimizer_ms, 2.5);
  EXPECT_DOUBLE_EQ(spread.compute_ms, 50 + (50 - 2.5));
  // Where the basis's update hid 50 ms of compute, only the rest of a 125 ms update hides the weights' gathers:
  // at 0.2 MB/s between two hosts, 75 ms of them.
  const StepTimePrediction shared_window = *predict_step_time(
      hiding, tiny_options(1, OffloadStrategy::cpu_optimizer), CollectiveLinks{1, 2, 1, 0, 0.0002, 0}, why);
  ASSERT_DOUBLE_EQ(shared_window.cpu_optimizer_ms, 125);
  EXPECT_DOUBLE_EQ(shared_window.compute_ms, 50);
  const double reduce = shared_window.collectives[0].time.ms, gather = shared_window.collectives[1].time.ms;
  EXPECT_NEAR(shared_window.collectives_ms, (reduce - 50) + (gather - 50 - 75), 1e-9);
}

TEST(StepTimeModel, ScalesAnotherModelOfTheFamilyByItsWorkAToken) {
  const PlanProfile profile = tiny_profile();
  std::string why;
  TrainingOptions o = tiny_options(0);
  o.model = resolve_model("gpt2");
  const double ratio = training_flops_per_token(o.model, 64) / training_flops_per_token(resolve_model("gpt2-tiny"), 64);
  EXPECT_GT(ratio, 100);
  const StepTimePrediction p = *predict_step_time(profile, o, CollectiveLinks{}, why);
  EXPECT_NEAR(p.compute_ms, 90 * ratio, 1e-6 * 90 * ratio);
  // The update runs at the basis's time a parameter over gpt2's parameters.
  const double params = double(ParameterLayout(o.model).trainable_numel());
  const double tiny = double(ParameterLayout(resolve_model("gpt2-tiny")).trainable_numel());
  EXPECT_NEAR(p.optimizer_ms, 10 * params / tiny, 1e-6 * p.optimizer_ms);
  EXPECT_NE(p.basis.find("scaled from gpt2-tiny"), std::string::npos) << p.basis;
}

// A strategy that did not run on one GPU (a model that fits one only with offload) takes the units' compute of
// another's run, and the update's time a parameter from whichever entry ran one.
TEST(StepTimeModel, TakesTheUnitsOfAnotherStrategyWhereItsOwnDidNotRun) {
  PlanProfile profile = tiny_profile();
  profile.entries.front().other_compute_ms = 2;
  std::string why;
  const StepTimePrediction full =
      *predict_step_time(profile, tiny_options(3, OffloadStrategy::cpu_full), CollectiveLinks{}, why);
  // Stage 3's none run is the nearest: its units' forward (0.3 x 100) and backward (0 here), no update of its own;
  // the host's update at the cpu_optimizer run's time a parameter.
  EXPECT_NE(full.basis.find("its units' compute alone (a none run)"), std::string::npos) << full.basis;
  EXPECT_DOUBLE_EQ(full.compute_ms, 0.3 * 100);
  EXPECT_DOUBLE_EQ(full.cpu_optimizer_ms, 250);
  EXPECT_DOUBLE_EQ(full.optimizer_ms, 0);
  // Without offload, from the offload run alone: its units, its other compute, and the device update's time from
  // the none runs (10 ms for the model).
  PlanProfile offload_only = profile;
  offload_only.entries.erase(offload_only.entries.begin(), offload_only.entries.begin() + 2);
  offload_only.entries.front().other_compute_ms = 2;
  EXPECT_FALSE(predict_step_time(offload_only, tiny_options(0), CollectiveLinks{}, why));
  EXPECT_NE(why.find("no update on the device"), std::string::npos) << why;
  // Where a machine measured the device's memory bandwidth, the update is timed as memory bound: fp32 master (the
  // weight itself in fp32 training) and moments both ways and the fp32 gradient in, 28 bytes a parameter.
  PlanProfile with_bandwidth = offload_only;
  with_bandwidth.machines.front().device_memory_gbps = 2.0;
  const double params = double(ParameterLayout(resolve_model("gpt2-tiny")).trainable_numel());
  const StepTimePrediction timed = *predict_step_time(with_bandwidth, tiny_options(0), CollectiveLinks{}, why);
  EXPECT_NEAR(timed.optimizer_ms, params * 28 / 2e9 * 1e3, 1e-9);
  EXPECT_NE(timed.basis.find("from its memory bandwidth"), std::string::npos) << timed.basis;
  offload_only.entries.push_back(profile.entries.front());
  offload_only.entries.back().configuration.world_size = 2;  // (a rate a parameter from a run on two GPUs)
  const StepTimePrediction none = *predict_step_time(offload_only, tiny_options(0), CollectiveLinks{}, why);
  EXPECT_DOUBLE_EQ(none.compute_ms, 0.3 * 50 + 2);
  EXPECT_DOUBLE_EQ(none.optimizer_ms, 10);
}

TEST(StepTimeModel, SaysWhatTheProfileLacks) {
  const PlanProfile profile = tiny_profile();
  std::string why;
  TrainingOptions o = tiny_options(0);
  o.seq = 128;
  EXPECT_FALSE(predict_step_time(profile, o, CollectiveLinks{}, why));
  EXPECT_NE(why.find("seq 128"), std::string::npos) << why;
  // Full checkpointing is estimated from a run without: one more forward a micro-batch.
  o = tiny_options(0);
  o.activation_checkpointing = ActivationCheckpointing::full;
  const StepTimePrediction full = *predict_step_time(profile, o, CollectiveLinks{}, why);
  EXPECT_DOUBLE_EQ(full.step_ms, 100 + 0.3 * 90);
  EXPECT_NE(full.basis.find("estimated"), std::string::npos);
}

}  // namespace
}  // namespace zb
