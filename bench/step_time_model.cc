#include "bench/step_time_model.h"

#include <algorithm>
#include <cmath>

#include "bench/peak_rates.h"
#include "core/dtype.h"
#include "core/strings.h"
#include "engine/parameter_store.h"
#include "kernels/optimizer_state.h"
#include "models/model_registry.h"
#include "models/parameter_layout.h"

namespace zb {

namespace {

// Whether entry `e` measured what `options` would run, on one GPU, up to the stage and the micro-batch.
bool same_kind(const ProfiledConfiguration& e, const TrainingOptions& options, bool same_checkpointing,
               bool same_strategy) {
  return e.world_size == 1 && e.seq_length == options.seq && e.dtype == dtype_name(options.dtype) &&
         e.optimizer == optimizer_name(options.optimizer) &&
         (!same_strategy || e.strategy == offload_spec_name(options.offload, options.offload_ratio)) &&
         e.lora_rank == (options.model.lora.enabled() ? options.model.lora.rank : 0) &&
         (!same_checkpointing ||
          e.activation_checkpointing == activation_checkpointing_name(options.activation_checkpointing));
}

// The basis: the entries of the kind at the nearest stage measured, at the micro-batch nearest the options' (in log
// scale), their median step. units_only: of another offload strategy (the configuration's did not run on one GPU,
// as a model too large for one GPU without offload), whose units' compute alone is taken.
struct Basis {
  ProfiledEntry entry;
  bool estimated_checkpointing = false;
  bool units_only = false;
};

std::optional<Basis> find_basis_of(const PlanProfile& profile, const TrainingOptions& options, bool same_strategy) {
  Basis basis;
  basis.units_only = !same_strategy;
  std::vector<const ProfiledEntry*> kind;
  for (bool same_checkpointing : {true, false}) {
    for (const ProfiledEntry& e : profile.entries)
      if (same_kind(e.configuration, options, same_checkpointing, same_strategy)) kind.push_back(&e);
    if (!kind.empty()) {
      basis.estimated_checkpointing = !same_checkpointing;
      break;
    }
    // Only full checkpointing is estimated from a run without it.
    if (options.activation_checkpointing != ActivationCheckpointing::full) return std::nullopt;
  }
  if (kind.empty()) return std::nullopt;
  if (basis.estimated_checkpointing) {
    std::erase_if(kind, [](const ProfiledEntry* e) { return e->configuration.activation_checkpointing != "none"; });
    if (kind.empty()) return std::nullopt;
  }
  // The measured stage nearest the configuration's (the lower of two as near: it has the fewer one-GPU copies).
  auto stage_distance = [&](const ProfiledEntry* e) {
    return 2 * std::abs(e->configuration.stage - options.zero.stage) + (e->configuration.stage > options.zero.stage);
  };
  const int nearest_stage = stage_distance(*std::min_element(
      kind.begin(), kind.end(), [&](const auto* a, const auto* b) { return stage_distance(a) < stage_distance(b); }));
  std::erase_if(kind, [&](const ProfiledEntry* e) { return stage_distance(e) != nearest_stage; });
  auto distance = [&](const ProfiledEntry* e) {
    return std::abs(std::log(double(e->configuration.micro_batch) / double(options.batch)));
  };
  const double nearest =
      distance(*std::min_element(kind.begin(), kind.end(), [&](const ProfiledEntry* a, const ProfiledEntry* b) {
        return distance(a) < distance(b);
      }));
  std::erase_if(kind, [&](const ProfiledEntry* e) { return distance(e) > nearest + 1e-12; });
  std::sort(kind.begin(), kind.end(),
            [](const ProfiledEntry* a, const ProfiledEntry* b) { return a->step_ms < b->step_ms; });
  basis.entry = *kind[kind.size() / 2];
  return basis;
}

std::optional<Basis> find_basis(const PlanProfile& profile, const TrainingOptions& options) {
  if (auto same = find_basis_of(profile, options, true)) return same;
  return find_basis_of(profile, options, false);
}

// The bytes of memory one parameter's update moves (on the host or the device): the fp32 master and moments both
// ways, the gradient in, and in 16-bit training the 16-bit weight out (in fp32 training the master is the weight).
double update_bytes_per_parameter(const TrainingOptions& options) {
  const double state = 4.0 + OptimizerStateFormat::of(options.optimizer).moment_bytes_per_element();
  const double sixteen_bit_weight = options.dtype == DType::f32 ? 0.0 : double(dtype_size(options.dtype));
  return 2.0 * state + double(dtype_size(options.dtype)) + sixteen_bit_weight;
}

// The median time a parameter of the device's (or the host's) update over the entries of the options' dtype and
// optimizer that ran one, or none.
std::optional<double> ms_per_parameter(const PlanProfile& profile, const TrainingOptions& options, bool on_device) {
  std::vector<double> rates;
  for (const ProfiledEntry& e : profile.entries) {
    if (e.configuration.dtype != dtype_name(options.dtype) ||
        e.configuration.optimizer != optimizer_name(options.optimizer))
      continue;
    const double params = on_device ? e.gpu_parameters : e.cpu_parameters;
    const double ms = on_device ? e.gpu_optimizer_ms : e.cpu_optimizer_ms;
    if (params > 0 && ms > 0) rates.push_back(ms / params);
  }
  if (rates.empty()) return std::nullopt;
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

std::optional<StepTimePrediction> predict_step_time(const PlanProfile& profile, const TrainingOptions& options,
                                                    const CollectiveLinks& links, std::string& why) {
  const std::optional<Basis> found = find_basis(profile, options);
  if (!found) {
    why = cat("the profile has no one-GPU measurement of ", offload_spec_name(options.offload, options.offload_ratio),
              ", ", dtype_name(options.dtype), ", ", optimizer_name(options.optimizer), ", seq ", options.seq,
              ", checkpointing ", activation_checkpointing_name(options.activation_checkpointing));
    return std::nullopt;
  }
  const ProfiledEntry& b = found->entry;
  const ProfiledConfiguration& bc = b.configuration;
  const int world = links.ranks();
  StepTimePrediction p;
  p.basis =
      cat("one GPU, stage ", bc.stage, ", micro-batch ", bc.micro_batch, ", accumulation ", bc.grad_accum,
          found->estimated_checkpointing ? ", without checkpointing (full checkpointing's recompute estimated)" : "");

  // The micro-batches' work, scaled to this configuration's tokens and accumulation, and for another model of the
  // profile's family to its work a token.
  const TransformerConfig profiled = resolve_model(profile.model);
  const double model_work =
      training_flops_per_token(options.model, options.seq) / training_flops_per_token(profiled, options.seq);
  const double scale =
      double(options.batch) / double(bc.micro_batch) * double(options.grad_accum) / double(bc.grad_accum) * model_work;
  if (options.model.name != profile.model) {
    p.basis += cat("; scaled from ", profile.model, " by the work a token (x", model_work, ")");
  }
  // With offload the host update runs beside the copies and the next forward: the step less the host update is the
  // rest, whose part beyond the units' compute is the copies (gradients down, weights up, once a step) that nothing
  // hid: taken out here, they shrink with the rank's share below. Without offload the copies are what the step's
  // collectives replace on several GPUs. A basis of another strategy gives its units' compute alone.
  const bool offload = options.offload != OffloadStrategy::none;
  const double copies = found->units_only ? 0.0 : b.exposed_copies_ms;
  const double units_ms = (b.forward_ms + b.backward_ms) * double(bc.grad_accum) + b.other_compute_ms;
  const double basis_work = found->units_only
                                ? units_ms
                                : b.step_ms - b.gpu_optimizer_ms - b.cpu_optimizer_ms - (offload ? 0.0 : copies);
  const double offload_copies = offload ? std::clamp(basis_work - units_ms, 0.0, copies) : 0.0;
  if (found->units_only) p.basis += cat("; its units' compute alone (a ", bc.strategy, " run)");
  p.compute_ms = std::max(0.0, basis_work - offload_copies) * scale;
  // The units' compute the basis's host update hid (beside the update's own pass over the units).
  const double hidden_by_host = offload && !found->units_only
                                    ? std::max(0.0, units_ms - (basis_work - offload_copies)) * scale : 0.0;
  if (found->estimated_checkpointing) {
    p.compute_ms +=
        b.forward_ms * double(options.batch) / double(bc.micro_batch) * double(options.grad_accum) * model_work;
  }
  // The one-GPU copies move the weights and gradients once a micro-batch, whatever its size: they grow with the
  // micro-batches and the parameters.
  const ParameterLayout layout(options.model), profiled_layout(profiled);
  const double model_size = double(layout.total_numel()) / double(profiled_layout.total_numel());
  p.copies_ms = offload ? 0.0 : copies * double(options.grad_accum) / double(bc.grad_accum) * model_size;

  // This rank's share of the updates.
  const ShardGeometry geometry = shard_geometry(options, 0, world);
  const double host_share = ParameterStore::host_optimizer_share(layout, geometry);
  const double trainable = double(layout.trainable_numel());
  const double rank_share = options.zero.stage >= 1 ? 1.0 / world : 1.0;
  // The basis's time a parameter, or where its update ran elsewhere, the profile's median.
  std::optional<double> gpu_rate =
      b.gpu_parameters > 0 ? b.gpu_optimizer_ms / b.gpu_parameters : ms_per_parameter(profile, options, true);
  // No update ran on the device (a model that fits one GPU only with offload): the update is memory bound, its
  // bytes at the device memory bandwidth measured.
  if (!gpu_rate && profile.device_memory_gbps()) {
    gpu_rate = update_bytes_per_parameter(options) / (*profile.device_memory_gbps() * 1e6);
    if (host_share < 1) p.basis += "; the device's update timed from its memory bandwidth";
  }
  const std::optional<double> cpu_rate =
      b.cpu_parameters > 0 ? b.cpu_optimizer_ms / b.cpu_parameters : ms_per_parameter(profile, options, false);
  if (host_share < 1) {
    if (!gpu_rate) {
      why = "the profile has no update on the device to time this configuration's by";
      return std::nullopt;
    }
    p.optimizer_ms = *gpu_rate * trainable * rank_share * (1 - host_share);
  }
  if (host_share > 0) {
    if (!cpu_rate) {
      why = "the profile has no update on the host to time this configuration's by";
      return std::nullopt;
    }
    // The rank's share at the basis's time a parameter (the basis's per-unit overheads shrink with it), unless the
    // host's memory bounds the node: its ranks updating their shares and copying gradients down and weights up, at
    // the aggregate rate the profile's machines measured with the node's ranks, in the measurement's bytes a
    // parameter. Without that
    // measurement, one rank's rate shared among the node's ranks (an upper bound: the update is memory bound).
    const double alone_ms = *cpu_rate * trainable * rank_share * host_share;
    if (const std::optional<double> host_rate = profile.host_update_gparams_per_s(links.gpus_per_node)) {
      const double node_parameters = trainable * rank_share * host_share * double(links.gpus_per_node);
      const double bytes = update_bytes_per_parameter(options) + 2.0 * double(dtype_size(options.dtype));
      const double ceiling_ms = node_parameters * bytes / (kMeasuredHostUpdateBytesPerParameter * *host_rate * 1e6);
      p.cpu_optimizer_ms = std::max(alone_ms, ceiling_ms);
      if (ceiling_ms > alone_ms) p.basis += "; the host's update bound by its memory";
    } else {
      p.cpu_optimizer_ms = alone_ms * double(links.gpus_per_node);
      if (links.gpus_per_node > 1) {
        p.basis += cat("; the host's CPU optimizer rate not measured: one rank's, shared among ", links.gpus_per_node);
      }
    }
    // The rank copies its share of the gradients and weights.
    p.copies_ms = offload_copies * rank_share * model_size;
    // A shorter host update than the basis's hides less of the units' compute: what it cannot cover is paid.
    p.compute_ms += std::max(0.0, hidden_by_host - p.cpu_optimizer_ms);
  }
  // The part of the host update that no compute runs beside: what it can hide of the weights' gathers.
  const double host_idle_ms = std::max(0.0, p.cpu_optimizer_ms - std::min(hidden_by_host, p.cpu_optimizer_ms));

  // The collectives.
  if (world > 1) {
    const double bytes = double(dtype_size(options.dtype));
    const double psi = trainable * bytes, phi = double(layout.total_numel()) * bytes;
    const double micro = double(options.grad_accum);
    auto add = [&](CollectiveKind kind, double total) {
      p.collectives.push_back({kind, total, collective_time(kind, total, links)});
    };
    switch (options.zero.stage) {
      case 0: add(CollectiveKind::all_reduce, psi); break;
      case 1:
        add(CollectiveKind::reduce_scatter, psi);
        add(CollectiveKind::all_gather, psi);
        break;
      case 2:
        add(CollectiveKind::reduce_scatter, psi * micro);
        add(CollectiveKind::all_gather, psi);
        break;
      default: {
        // Forward and backward gathers, less what the slots keep: the basis's own, where it ran stage 3.
        // (The basis gathered all its model's weights, frozen ones too.)
        auto gathered = b.collective_bytes.find("all_gather");
        const double per_micro =
            bc.stage == 3 && gathered != b.collective_bytes.end() && gathered->second > 0
                ? gathered->second / double(bc.grad_accum) / (double(profiled_layout.total_numel()) * bytes)
                : 2.0;
        add(CollectiveKind::all_gather, phi * per_micro * micro);
        add(CollectiveKind::reduce_scatter, psi * micro);
      }
    }
    // With offload the gathers of the updated weights (after the update in stages 1-2, in the next forward in stage
    // 3, which waits for the host unit by unit) run while the host updates: only what outlasts the part of the
    // update no compute runs beside costs the step. The reductions run during the micro-batches' backward, before
    // the host update starts. Compute hides at most its own length of the collectives beside it.
    double reductions_ms = 0, gathers_ms = 0;
    for (const CollectiveEstimate& c : p.collectives)
      (c.kind == CollectiveKind::all_gather ? gathers_ms : reductions_ms) += c.time.ms;
    auto beside_compute = [&](double ms) { return std::max(kCollectiveContention * ms, ms - p.compute_ms); };
    const double collectives_ms =
        offload ? beside_compute(reductions_ms) + std::max(0.0, beside_compute(gathers_ms) - host_idle_ms)
                : beside_compute(reductions_ms + gathers_ms);
    p.collectives_ms = offload ? collectives_ms : std::max(p.copies_ms, collectives_ms);
  } else {
    p.collectives_ms = offload ? 0.0 : p.copies_ms;
  }
  // The offload's copies are the host's, beside none of the collectives; without offload they are in collectives_ms.
  p.step_ms = p.compute_ms + p.optimizer_ms + p.cpu_optimizer_ms + p.collectives_ms + (offload ? p.copies_ms : 0.0);
  return p;
}

}  // namespace zb
