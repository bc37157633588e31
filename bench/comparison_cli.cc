#include "bench/comparison_cli.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "bench/deepspeed_config.h"
#include "bench/gpu_peaks.h"
#include "core/cuda_devices.h"
#include "core/errors.h"
#include "core/strings.h"

namespace zb {

namespace po = boost::program_options;

void add_comparison_flags(po::options_description& options, ComparisonFlags& f, ComparisonKind kind) {
  TrainingFlags& t = f.training;
  const bool zero = kind == ComparisonKind::zero_stages;
  // clang-format off
  options.add_options()
    ("model", po::value(&t.model)->default_value(t.model), kModelFlagHelp)
    ("batch-size", po::value(&t.batch_size)->default_value(t.batch_size), "samples per micro-batch, per GPU")
    ("seq-length", po::value<int64_t>()->notifier([&t](int64_t x) { t.seq_length = x; }),
     "tokens per sample (default: min(512, the model's maximum))")
    ("num-steps", po::value(&t.num_steps)->default_value(t.num_steps), "timed optimizer steps per configuration")
    ("grad-accum", po::value(&t.grad_accum)->default_value(t.grad_accum), "micro-batches per optimizer step")
    ("dtype", po::value(&t.dtype)->default_value(t.dtype, "bf16 on cuda, fp32 on cpu"), kDtypeHelp)
    ("activation-checkpointing", po::value(&f.checkpointing)->multitoken()->default_value(f.checkpointing, "none"),
     (std::string(kActivationCheckpointingHelp) + ". Several (e.g. none full) compare each with every " +
      (zero ? "stage" : "strategy")).c_str())
    ("optimizer", po::value(&t.optimizer)->default_value(t.optimizer), kOptimizerHelp)
    ("config", po::value(&f.config),
     "a DeepSpeed JSON config: its stage, offload, micro-batch, gradient accumulation, bf16/fp16, bucket "
     "sizes and aio settings replace the defaults (flags given on the command line win); offload_bench adds "
     "its partial optimizer offload (offload_optimizer.ratio below 1) to the strategies compared by default")
    ("baseline", po::value(&f.baseline),
     "regression mode: a results JSON of an earlier run; exit 1 when a configuration's throughput or GPU peak "
     "memory is worse than it by more than --max-regression")
    ("max-regression", po::value(&f.max_regression)->default_value(f.max_regression),
     "percent of throughput lost or peak memory gained allowed against --baseline");
  // clang-format on
  add_run_flags(options, t);
  add_runner_flags(options, f.runner,
                   "each file named after the run: <kind>_comparison_<UTC time>[_N].json, .csv and .svg, and the "
                   "recommended configuration as a DeepSpeed config, ds_config_<kind>_comparison_<UTC time>[_N].json");
  // clang-format off
  if (zero) {
    options.add_options()
      ("stages", po::value(&f.stages)->multitoken()->default_value(f.stages, "0 1 2 3"), "ZeRO stages to compare")
      ("offload", po::value(&t.offload)->default_value(t.offload),
       "offload strategy of every stage: none, cpu_optimizer, cpu_full or nvme")
      ("offload-ratio", po::value(&t.offload_ratio)->default_value(t.offload_ratio), kOffloadRatioHelp)
      ("nvme-path", po::value(&t.nvme_path), "folder of the nvme strategy's files");
  } else {
    options.add_options()
      ("strategies", po::value(&f.strategies)->multitoken(),
       "offload strategies to compare: none, cpu_optimizer, cpu_full, nvme (default: none cpu_optimizer "
       "cpu_full, and nvme too when --nvme-path is given); cpu_optimizer:R and nvme:R offload the share R "
       "of the optimizer state, in (0, 1], and keep the rest on the GPU (DeepSpeed's offload_optimizer.ratio)")
      ("nvme-path", po::value(&t.nvme_path), "folder of the nvme strategy's files (must exist and be writable)")
      ("stage", po::value(&f.stage),
       "ZeRO stage of every strategy (default: 2 without parameter offload, 3 with it, i.e. for cpu_full)");
  }
  options.add_options()
    ("speculative-update", po::value(&t.speculative_update)->default_value(t.speculative_update, "true"),
     "cpu_optimizer and cpu_full: update units on the CPU during backward, kept when the step does not clip");
  // clang-format on
  add_aio_flags(options, t.aio);
  add_zero_flags(options, t.zero, /*stage_flag=*/false);
  add_lora_flags(options, t);
  add_loss_scaling_flags(options, t);
  add_device_memory_limit_flag(options, t);
}

void add_runner_flags(po::options_description& options, RunnerFlags& f, const std::string& outputs) {
  // clang-format off
  options.add_options()
    ("warmup-steps", po::value(&f.warmup_steps)->default_value(f.warmup_steps),
     "optimizer steps before the timed ones (not timed)")
    ("repeat", po::value(&f.repeat)->default_value(f.repeat),
     "runs of each configuration (mean and standard deviation over them)")
    ("output-dir", po::value(&f.output_dir)->default_value(f.output_dir),
     ("folder of the results, " + outputs + "; created if missing").c_str())
    ("gpu-hour-usd", po::value(&f.gpu_hour_usd)->default_value(f.gpu_hour_usd, "none"),
     "price of one GPU-hour: adds the cost per 1,000 samples")
    ("peak-tflops", po::value(&f.peak_tflops)->default_value(0.0, "from the GPU's name"),
     "the GPU's dense bf16 peak in TFLOP/s, for MFU")
    ("agreement-timeout-s", po::value(&f.agreement_timeout_s)->default_value(f.agreement_timeout_s),
     "how long a rank that failed alone waits for the others (stuck in a collective) before it ends the job")
    ("inject-failure", po::value(&f.inject_failure),
     "for tests: RANK:CONFIGURATION:STEP makes that rank fail at that step (1-based) of that configuration");
  // clang-format on
}

void add_run_flags(po::options_description& options, TrainingFlags& t) {
  // clang-format off
  options.add_options()
    ("lr", po::value(&t.lr)->default_value(t.lr, "3e-4"), "learning rate (constant)")
    ("grad-clip", po::value(&t.grad_clip)->default_value(t.grad_clip), "global gradient-norm bound (0: none)")
    ("device", po::value(&t.device)->default_value(t.device, "cuda"),
     "cuda (one GPU per rank) or cpu; without a GPU, --device cpu must be given")
    ("seed", po::value(&t.seed)->default_value(t.seed), "seed of the initialisation and the synthetic tokens")
    ("data", po::value(&t.data)->default_value(t.data, "synthetic"), "token files (a quoted glob)")
    ("data-format", po::value(&t.data_format)->default_value(t.data_format), "llmc or raw");
  // clang-format on
}

void check_token_files(const TrainingOptions& options, const BenchSettings& settings, const MpiWorld& world) {
  if (settings.data_glob.empty()) return;
  TrainingRun data_check;
  data_check.options = options;
  data_check.data_glob = settings.data_glob;
  data_check.data_format = settings.data_format;
  make_token_source(data_check, world.rank(), world.size());
}

std::string program_device(const std::string& device, const char* program) {
  // The GPU is the default; without one, say so and show the CPU form instead of silently using the CPU.
  if (device.empty()) {
    if (cuda_device_count() == 0) {
      throw UsageError(cat("--device: no CUDA GPU is visible, and ", program, " runs on GPUs by default; to run ",
                           "on the CPU, say so: ", program, " --device cpu --model gpt2-tiny ..."));
    }
    return "cuda:0";
  }
  return device == "cuda" ? "cuda:0" : device;
}

BenchSettings runner_settings(const RunnerFlags& f, const TrainingRun& run) {
  if (f.warmup_steps < 0 || f.warmup_steps > 1'000'000) {
    throw UsageError(cat("--warmup-steps: must be an integer in [0, 1000000], got ", f.warmup_steps));
  }
  if (f.repeat < 1 || f.repeat > 1000) throw UsageError(cat("--repeat: must be in [1, 1000], got ", f.repeat));
  if (!(f.gpu_hour_usd >= 0) || !std::isfinite(f.gpu_hour_usd)) {
    throw UsageError(cat("--gpu-hour-usd: must be a non-negative price, got ", f.gpu_hour_usd));
  }
  if (!(f.peak_tflops >= 0) || !std::isfinite(f.peak_tflops)) {
    throw UsageError(cat("--peak-tflops: must be a positive number (0: look it up), got ", f.peak_tflops));
  }
  if (!(f.agreement_timeout_s > 0 && f.agreement_timeout_s <= 86400)) {
    throw UsageError(cat("--agreement-timeout-s: must be in (0, 86400] seconds, got ", f.agreement_timeout_s));
  }
  std::optional<BenchSettings::InjectedFailure> inject;
  if (!f.inject_failure.empty()) {
    BenchSettings::InjectedFailure i;
    long long step = 0;
    char extra = 0;
    if (std::sscanf(f.inject_failure.c_str(), "%d:%d:%lld%c", &i.rank, &i.configuration, &step, &extra) != 3 ||
        i.rank < 0 || i.configuration < 1 || step < 1) {
      throw UsageError(
          cat("--inject-failure: RANK:CONFIGURATION:STEP (rank from 0, the others from 1), got ", f.inject_failure));
    }
    i.step = step;
    inject = i;
  }
  BenchSettings s;
  s.device = run.device;
  s.backend_options = program_backend_options();
  s.num_steps = run.num_steps;
  s.warmup_steps = f.warmup_steps;
  s.repeat = f.repeat;
  if (f.gpu_hour_usd > 0) s.gpu_hour_usd = f.gpu_hour_usd;
  s.device_memory_limit = run.device_memory_limit;
  s.agreement_timeout_s = f.agreement_timeout_s;
  s.inject_failure = inject;
  s.data_glob = run.data_glob;
  s.data_format = run.data_format;
  s.profile = run.profile;
  if (f.peak_tflops > 0) {
    s.peak_tflops = f.peak_tflops;
    s.peak_for_every_dtype = true;
  } else if (run.device.is_cuda()) {  // (bf16's and fp16's peaks are one)
    s.peak_tflops = bf16_peak_tflops(cuda_device_name(run.device.index));
  }
  return s;
}

bool given(const po::variables_map& vm, const char* flag) { return vm.count(flag) && !vm[flag].defaulted(); }

namespace {

// DeepSpeed's offload devices as one of our strategies.
std::string strategy_of(const DeepSpeedConfig& ds) {
  const std::string optimizer = ds.offload_optimizer.value_or("none"), param = ds.offload_param.value_or("none");
  if (optimizer == "nvme" || param == "nvme") return "nvme";
  if (param == "cpu") return "cpu_full";
  if (optimizer == "cpu") return "cpu_optimizer";
  return "none";
}

// The config's values where the command line left the default.
void apply_deepspeed_config(const DeepSpeedConfig& ds, const po::variables_map& vm, ComparisonFlags& f,
                            ComparisonKind kind, int world) {
  TrainingFlags& t = f.training;
  if (ds.stage) {
    if (kind == ComparisonKind::zero_stages && !given(vm, "stages")) f.stages = {*ds.stage};
    if (kind == ComparisonKind::offload_strategies && !given(vm, "stage")) f.stage = *ds.stage;
  }
  if (kind == ComparisonKind::zero_stages && !given(vm, "offload") && (ds.offload_optimizer || ds.offload_param)) {
    t.offload = strategy_of(ds);
  }
  // The config's ratio goes with its optimizer offload (DeepSpeed reads it there and nowhere else). zero_bench
  // runs with it; offload_bench, which compares strategies, adds the config's own to the ones it compares by
  // default (strategies_of), unless --strategies names them.
  auto offloads_optimizer = [](const std::string& strategy) {
    return strategy == "cpu_optimizer" || strategy == "nvme";
  };
  if (kind == ComparisonKind::zero_stages && ds.offload_ratio && !given(vm, "offload-ratio") &&
      offloads_optimizer(t.offload))
    t.offload_ratio = *ds.offload_ratio;
  if (kind == ComparisonKind::offload_strategies && ds.offload_ratio && *ds.offload_ratio < 1.0 &&
      offloads_optimizer(strategy_of(ds)))
    f.config_strategy = offload_spec_name(parse_offload_strategy(strategy_of(ds)), *ds.offload_ratio);
  if (ds.nvme_path && !given(vm, "nvme-path")) t.nvme_path = *ds.nvme_path;
  if (const std::optional<DeepSpeedBatch> batch = deepspeed_batch(ds, world, cat("--config ", f.config))) {
    if (!given(vm, "batch-size")) t.batch_size = batch->micro_batch;
    if (!given(vm, "grad-accum")) t.grad_accum = batch->grad_accum;
  }
  if (ds.precision && !given(vm, "dtype")) t.dtype = *ds.precision;
  const bool fp16 = [&] {  // (a dtype not understood is refused, naming --dtype, when the flags are validated)
    try {
      return !t.dtype.empty() && parse_dtype(t.dtype) == DType::f16;
    } catch (const UsageError&) {
      return false;
    }
  }();
  if (fp16) {  // the fp16 section's loss scaling, where the flags left it
    if (ds.loss_scale && !given(vm, "loss-scale")) t.loss_scale = *ds.loss_scale;
    if (ds.initial_scale_power && !given(vm, "initial-scale-power")) t.initial_scale_power = *ds.initial_scale_power;
    if (ds.loss_scale_window && !given(vm, "loss-scale-window")) t.loss_scale_window = *ds.loss_scale_window;
    if (ds.hysteresis && !given(vm, "hysteresis")) t.hysteresis = *ds.hysteresis;
    if (ds.min_loss_scale && !given(vm, "min-loss-scale")) t.min_loss_scale = *ds.min_loss_scale;
  }
  if (ds.gradient_clipping && !given(vm, "grad-clip")) t.grad_clip = *ds.gradient_clipping;
  if (ds.activation_checkpointing && !given(vm, "activation-checkpointing")) f.checkpointing = {*ds.activation_checkpointing};
  if (ds.optimizer && !given(vm, "optimizer")) t.optimizer = *ds.optimizer;
  if (ds.lr && !given(vm, "lr")) t.lr = *ds.lr;
  if (ds.weight_decay && !given(vm, "weight-decay")) t.weight_decay = *ds.weight_decay;
  ZeroConfig& z = t.zero;
  if (ds.reduce_bucket_size && !given(vm, "reduce-bucket-size")) z.reduce_bucket_size = *ds.reduce_bucket_size;
  if (ds.allgather_bucket_size && !given(vm, "allgather-bucket-size"))
    z.allgather_bucket_size = *ds.allgather_bucket_size;
  if (ds.overlap_comm && !vm.count("overlap-comm")) z.overlap_comm = *ds.overlap_comm;
  if (ds.stage3_prefetch_bucket_size && !given(vm, "stage3-prefetch-bucket-size"))
    z.stage3_prefetch_bucket_size = *ds.stage3_prefetch_bucket_size;
  if (ds.stage3_param_persistence_threshold && !given(vm, "stage3-param-persistence-threshold"))
    z.stage3_param_persistence_threshold = *ds.stage3_param_persistence_threshold;
  AioConfig& a = t.aio;
  if (ds.aio_block_size && !given(vm, "aio-block-size")) a.block_size = *ds.aio_block_size;
  if (ds.aio_queue_depth && !given(vm, "aio-queue-depth")) a.queue_depth = *ds.aio_queue_depth;
  if (ds.aio_intra_op_parallelism && !given(vm, "aio-intra-op-parallelism"))
    a.intra_op_parallelism = *ds.aio_intra_op_parallelism;
  if (ds.aio_single_submit && !given(vm, "aio-single-submit")) a.single_submit = *ds.aio_single_submit;
  if (ds.aio_overlap_events && !given(vm, "aio-overlap-events")) a.overlap_events = *ds.aio_overlap_events;
}

std::vector<StrategySpec> strategies_of(const ComparisonFlags& f) {
  std::vector<std::string> names = f.strategies;
  if (names.empty()) {
    names = {"none", "cpu_optimizer", "cpu_full"};
    if (!f.training.nvme_path.empty()) names.push_back("nvme");
    if (!f.config_strategy.empty()) names.push_back(f.config_strategy);  // a partial offload from --config
  }
  std::vector<StrategySpec> out;
  std::set<std::string> seen;
  for (const std::string& name : names) {
    StrategySpec spec;
    try {
      spec = parse_strategy_spec(name);
    } catch (const UsageError& e) {
      throw UsageError(cat("--strategies: ", e.what()));
    }
    if (!seen.insert(offload_spec_name(spec.strategy, spec.ratio)).second) {
      throw UsageError(cat("--strategies: ", name, " is named twice"));
    }
    out.push_back(spec);
  }
  return out;
}

// --activation-checkpointing's modes, each named once.
std::vector<ActivationCheckpointing> checkpointing_modes(const std::vector<std::string>& names) {
  if (names.empty()) throw UsageError("--activation-checkpointing: name at least one mode (none, full, selective)");
  std::vector<ActivationCheckpointing> modes;
  for (const std::string& name : names) {
    try {
      modes.push_back(parse_activation_checkpointing(name));
    } catch (const UsageError& e) {
      throw UsageError(cat("--activation-checkpointing: ", e.what()));
    }
    if (std::count(modes.begin(), modes.end(), modes.back()) > 1)
      throw UsageError(cat("--activation-checkpointing: ", name, " is named twice"));
  }
  return modes;
}

}  // namespace

ComparisonPlan plan_comparison(ComparisonFlags f, const po::variables_map& vm, ComparisonKind kind, int world) {
  const char* program = kind == ComparisonKind::zero_stages ? "zero_bench" : "offload_bench";
  if (!f.config.empty()) apply_deepspeed_config(read_deepspeed_config(f.config), vm, f, kind, world);
  TrainingFlags& t = f.training;
  t.device = program_device(t.device, program);
  if (!(f.max_regression >= 0 && f.max_regression <= 1000)) {
    throw UsageError(cat("--max-regression: must be a percentage in [0, 1000], got ", f.max_regression));
  }
  if (!f.baseline.empty() && !std::ifstream(f.baseline)) {
    throw UsageError(cat("--baseline ", f.baseline, ": cannot be read"));
  }

  ComparisonPlan plan;
  plan.kind = kind;
  struct Run {
    int stage;
    StrategySpec offload;
  };
  std::vector<Run> runs;
  if (kind == ComparisonKind::zero_stages) {
    if (f.stages.empty()) throw UsageError("--stages: name at least one stage (0, 1, 2 or 3)");
    std::set<int> seen;
    for (int stage : f.stages) {
      if (stage < 0 || stage > 3) throw UsageError(cat("--stages: ", stage, " is not a ZeRO stage (0, 1, 2, 3)"));
      if (!seen.insert(stage).second) throw UsageError(cat("--stages: ", stage, " is named twice"));
    }
    // validate_training_flags checks --offload, and --nvme-path when it is nvme.
  } else {
    if (vm.count("stage") && (f.stage < 0 || f.stage > 3)) {
      throw UsageError(cat("--stage: must be 0, 1, 2 or 3, got ", f.stage));
    }
  }
  const std::vector<StrategySpec> strategies =
      kind == ComparisonKind::offload_strategies ? strategies_of(f) : std::vector<StrategySpec>{};
  const bool wants_nvme = std::any_of(strategies.begin(), strategies.end(),
                                      [](const StrategySpec& s) { return s.strategy == OffloadStrategy::nvme; });
  if (wants_nvme && t.nvme_path.empty()) {
    throw UsageError("--strategies: nvme needs --nvme-path FOLDER (a folder on the NVMe drive to hold its files)");
  }
  if (kind == ComparisonKind::offload_strategies) t.offload = wants_nvme ? "nvme" : "none";  // checks the path
  const std::vector<ActivationCheckpointing> modes = checkpointing_modes(f.checkpointing);
  const TrainingRun run = validate_training_flags(t);
  require_writable_folder(f.runner.output_dir, "output-dir");

  if (kind == ComparisonKind::zero_stages) {
    for (int stage : f.stages) runs.push_back({stage, {run.options.offload, run.options.offload_ratio}});
  } else {
    for (const StrategySpec& spec : strategies) {
      runs.push_back({f.stage >= 0 ? f.stage : spec.strategy == OffloadStrategy::cpu_full ? 3 : 2, spec});
    }
  }
  for (const ActivationCheckpointing mode : modes) {
    for (const auto& [stage, offload] : runs) {
      TrainingOptions options = run.options;
      options.zero.stage = stage;
      options.offload = offload.strategy;
      options.offload_ratio = offload.ratio;
      options.activation_checkpointing = mode;
      plan.configurations.push_back(options);
    }
  }

  plan.settings = runner_settings(f.runner, run);
  plan.output_dir = f.runner.output_dir;
  plan.baseline = f.baseline;
  plan.max_regression = f.max_regression;
  plan.title = cat(program, ": ", run.options.model.name, ", batch ", run.options.batch, " x seq ", run.options.seq,
                   run.options.grad_accum > 1 ? cat(" x accum ", run.options.grad_accum) : std::string(),
                   run.device.is_cuda() ? " per GPU" : " per rank",
                   run.options.model.lora.enabled() ? cat("; LoRA ", lora_description(run.options.model.lora))
                                                    : std::string());
  return plan;
}

}  // namespace zb
