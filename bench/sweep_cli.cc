#include "bench/sweep_cli.h"

#include <fstream>
#include <map>
#include <set>

#include "core/errors.h"
#include "core/strings.h"
#include "models/model_registry.h"

namespace zb {

namespace po = boost::program_options;

void add_sweep_flags(po::options_description& options, SweepFlags& f) {
  SweepAxes& a = f.axes;
  TrainingFlags& t = f.training;
  t.num_steps = 30;  // the profiling matrix's
  // An axis's help: one or more values, each run with every value of the other axes.
  const std::string axis = "one or more: ";
  const auto list = [](auto* values, const char* shown) {
    return po::value(values)->multitoken()->default_value(*values, shown);
  };
  // clang-format off
  options.add_options()
    ("models", list(&a.models, "gpt2"), (axis + kModelFlagHelp).c_str())
    ("batch-sizes", list(&a.batch_sizes, "4"), (axis + "samples per micro-batch, per GPU").c_str())
    ("seq-lengths", list(&a.seq_lengths, "0"),
     (axis + "tokens per sample (0: the model's default, min(512, its maximum))").c_str())
    ("grad-accum", list(&a.grad_accum, "1"), (axis + "micro-batches per optimizer step").c_str())
    ("optimizers", list(&a.optimizers, "adamw"), (axis + kOptimizerHelp).c_str())
    ("stages", list(&a.stages, "0"), (axis + "ZeRO stages").c_str())
    ("strategies", list(&a.strategies, "none"),
     (axis + "offload strategies: none, cpu_optimizer, cpu_full, nvme").c_str())
    ("activation-checkpointing", list(&a.checkpointing, "none"), (axis + kActivationCheckpointingHelp).c_str())
    ("lora-rank", list(&a.lora_ranks, "0"), (axis + kLoraRankHelp).c_str())
    ("dtype", list(&a.dtypes, "bf16 on cuda, fp32 on cpu"), (axis + kDtypeHelp).c_str())
    ("num-steps", po::value(&t.num_steps)->default_value(t.num_steps), "timed optimizer steps per configuration")
    ("config", po::value(&f.config),
     "a profiling matrix's JSON: models, batch_sizes, sequence_lengths, accumulation_steps, optimizers, num_steps, "
     "stages, strategies, activation_checkpointing, lora_ranks, dtypes (flags given on the command line win)")
    ("gather", po::value(&f.gather)->multitoken(),
     "merge the per-model profiles found under these folders (earlier runs' --output-dir, from any host) into "
     "--output-dir/profiles/<model>/<gpu>/profile.json, refusing profiles of another model, GPU or code version; "
     "runs nothing else")
    ("offload-ratio", po::value(&t.offload_ratio)->default_value(t.offload_ratio), kOffloadRatioHelp)
    ("nvme-path", po::value(&t.nvme_path),
     "folder of the nvme strategy's files; the profile also measures the NVMe's rates there")
    ("speculative-update", po::value(&t.speculative_update)->default_value(t.speculative_update, "true"),
     "cpu_optimizer and cpu_full: update units on the CPU during backward, kept when the step does not clip");
  // clang-format on
  add_run_flags(options, t);
  add_runner_flags(options, f.runner,
                   "each file named after the run: sweep_<UTC time>[_N].json and .csv (a record a configuration), "
                   ".svg (the heatmaps), and profiles/<model>/<gpu>/profile.json");
  add_aio_flags(options, t.aio);
  add_zero_flags(options, t.zero, /*stage_flag=*/false);
  add_lora_flags(options, t, /*rank_flag=*/false);
  add_loss_scaling_flags(options, t);
  add_device_memory_limit_flag(options, t);
}

namespace {

// The axes: the config file's where it names them, the command line's where it was given.
SweepAxes merged_axes(const SweepFlags& f, const po::variables_map& vm, int64_t& num_steps) {
  if (f.config.empty()) return f.axes;
  std::ifstream in(f.config);
  if (!in) throw UsageError(cat("--config ", f.config, ": cannot be read"));
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(cat("--config ", f.config, ": not JSON: ", e.what()));
  }
  SweepAxes axes;
  std::optional<int64_t> steps;
  read_sweep_config(config, f.config, axes, steps);
  if (steps && !given(vm, "num-steps")) num_steps = *steps;
  if (given(vm, "models")) axes.models = f.axes.models;
  if (given(vm, "batch-sizes")) axes.batch_sizes = f.axes.batch_sizes;
  if (given(vm, "seq-lengths")) axes.seq_lengths = f.axes.seq_lengths;
  if (given(vm, "grad-accum")) axes.grad_accum = f.axes.grad_accum;
  if (given(vm, "optimizers")) axes.optimizers = f.axes.optimizers;
  if (given(vm, "stages")) axes.stages = f.axes.stages;
  if (given(vm, "strategies")) axes.strategies = f.axes.strategies;
  if (given(vm, "activation-checkpointing")) axes.checkpointing = f.axes.checkpointing;
  if (given(vm, "lora-rank")) axes.lora_ranks = f.axes.lora_ranks;
  if (given(vm, "dtype")) axes.dtypes = f.axes.dtypes;
  return axes;
}

// A point's training flags, checked as train checks its own; a refusal names the flag and the point.
TrainingRun point_run(TrainingFlags t, const SweepPoint& p) {
  t.model = p.model;
  t.dtype = p.dtype;
  t.optimizer = p.optimizer;
  t.lora_rank = p.lora_rank;
  t.offload = p.strategy;
  t.activation_checkpointing = p.checkpointing;
  t.grad_accum = p.grad_accum;
  t.batch_size = p.batch_size;
  t.seq_length = p.seq_length > 0 ? std::optional<int64_t>(p.seq_length) : std::nullopt;
  t.zero.stage = p.stage;
  if (p.stage < 0 || p.stage > 3) throw UsageError(cat("--stages: ", p.stage, " is not a ZeRO stage (0, 1, 2, 3)"));
  if (p.strategy == "nvme" && t.nvme_path.empty()) {
    throw UsageError("--strategies: nvme needs --nvme-path FOLDER (a folder on the NVMe drive to hold its files)");
  }
  TrainingRun run = validate_training_flags(t);
  run.options.zero.stage = p.stage;
  return run;
}

}  // namespace

SweepPlan plan_sweep(SweepFlags f, const po::variables_map& vm, int world) {
  (void)world;
  TrainingFlags& t = f.training;
  int64_t num_steps = t.num_steps;
  SweepPlan plan;
  plan.axes = merged_axes(f, vm, num_steps);
  // "bf16 on cuda, fp32 on cpu" is the dtype axis's default: the device's own.
  t.num_steps = num_steps;
  t.device = program_device(t.device, "sweep");
  // A sequence length beyond a model's maximum leaves that model's points at it out (a matrix of several models names
  // lengths some of them cannot take); the others must all be valid.
  std::map<std::string, TransformerConfig> models;
  std::map<std::pair<std::string, int64_t>, int> left_out;
  std::set<std::string> resolved_points;
  for (const std::string& model : plan.axes.models) {
    try {
      models[model] = resolve_model(model);
    } catch (const UsageError& e) {
      throw UsageError(cat("--models: ", e.what()));
    }
  }
  auto why_left_out = [&](const std::string& model, int64_t seq) -> std::string {
    const TransformerConfig& c = models.at(model);
    if (seq > c.max_seq_len) return cat("seq ", seq, " exceeds its maximum of ", c.max_seq_len);
    return std::string();
  };
  for (const SweepPoint& p : sweep_points(plan.axes)) {  // (validates the axes)
    if (!why_left_out(p.model, p.seq_length).empty()) {
      ++left_out[{p.model, p.seq_length}];
      continue;
    }
    const TrainingOptions options = point_run(t, p).options;
    // Two axis values may name one configuration (seq 0, the default, and the length it stands for; dtype "" and
    // the device's default): refused, or the second would replace the first in the profile.
    SweepPoint as_run = p;
    as_run.dtype = dtype_name(options.dtype);
    const std::string resolved = cat(as_run.kind(), "|", options.seq, "|", p.batch_size);
    if (!resolved_points.insert(resolved).second) {
      throw UsageError(cat("--seq-lengths or --dtype: two values name the same configuration (", p.model, ", ",
                           dtype_name(options.dtype), ", seq ", options.seq, "): name each once"));
    }
    plan.points.push_back(p);
    plan.configurations.push_back(options);
  }
  for (const auto& [what, n] : left_out) {
    plan.left_out.push_back(
        cat(what.first, ": ", why_left_out(what.first, what.second), " (", n, " configuration(s) left out)"));
  }
  if (plan.points.empty()) {
    throw UsageError(cat("--seq-lengths: every length is beyond what the models take (", plan.left_out.front(), ")"));
  }
  TrainingRun first = point_run(t, plan.points.front());
  first.profile.in_memory = true;  // every configuration's last steps split by unit (the per-model profile)
  plan.settings = runner_settings(f.runner, first);
  require_writable_folder(f.runner.output_dir, "output-dir");
  plan.output_dir = f.runner.output_dir;
  plan.nvme_path = t.nvme_path;
  return plan;
}

}  // namespace zb
