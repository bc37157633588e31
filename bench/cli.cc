#include "bench/cli.h"

#include "bench/device_memory_cap.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "core/cuda_devices.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/strings.h"
#include "models/model_registry.h"

namespace zb {

namespace po = boost::program_options;

namespace {

BackendOptions& parsed_backend_options() {
  static BackendOptions options;
  return options;
}

}  // namespace

const BackendOptions& program_backend_options() {
  return parsed_backend_options();
}

void add_training_flags(po::options_description& flags, TrainingFlags& v) {
  // clang-format off
  flags.add_options()
    ("model", po::value(&v.model)->default_value(v.model), kModelFlagHelp)
    ("batch-size", po::value(&v.batch_size)->default_value(v.batch_size), "samples per micro-batch (per GPU)")
    ("seq-length", po::value<int64_t>()->notifier([&v](int64_t x) { v.seq_length = x; }),
     "tokens per sample (default: min(512, the model's maximum))")
    ("num-steps", po::value(&v.num_steps)->default_value(v.num_steps), "optimizer steps")
    ("grad-accum", po::value(&v.grad_accum)->default_value(v.grad_accum), "micro-batches per optimizer step")
    ("lr", po::value(&v.lr)->default_value(v.lr, "3e-4"), "learning rate (constant)")
    ("optimizer", po::value(&v.optimizer)->default_value(v.optimizer), kOptimizerHelp)
    ("weight-decay", po::value<double>()->notifier([&v](double x) { v.weight_decay = x; }),
     "weight decay, decoupled for adamw, L2 for adam and sgd (default: 0.01 for adamw, 0 otherwise)")
    ("momentum", po::value(&v.momentum)->default_value(v.momentum), "SGD momentum")
    ("grad-clip", po::value(&v.grad_clip)->default_value(v.grad_clip), "global gradient-norm bound (0: no clipping)")
    ("seed", po::value(&v.seed)->default_value(v.seed), "seed of the initialisation and the synthetic tokens")
    ("device", po::value(&v.device)->default_value(v.device, "cuda if a GPU is visible, else cpu"),
     "cpu, cuda or cuda:N")
    ("dtype", po::value(&v.dtype)->default_value(v.dtype, "bf16 on cuda, fp32 on cpu"), kDtypeHelp)
    ("activation-checkpointing", po::value(&v.activation_checkpointing)->default_value(v.activation_checkpointing),
     kActivationCheckpointingHelp)
    ("data", po::value(&v.data)->default_value(v.data, "synthetic"),
     "token files (a glob, quoted), read in sorted order; synthetic uniform tokens when absent")
    ("data-format", po::value(&v.data_format)->default_value(v.data_format),
     "llmc (llm.c shards: 256 x int32 header, uint16 ids) or raw (headerless uint16 ids)")
    ("offload", po::value(&v.offload)->default_value(v.offload),
     "none; cpu_optimizer (fp32 master weights and optimizer state in pinned host memory, updated by the "
     "CPU optimizer); cpu_full (that, and the bf16 weights in pinned host memory, each unit copied to the GPU "
     "for its use); nvme (the optimizer state in a file per rank under --nvme-path, streamed through the CPU "
     "optimizer)")
    ("nvme-path", po::value(&v.nvme_path)->default_value(v.nvme_path), "folder of the nvme strategy's files")
    ("offload-ratio", po::value(&v.offload_ratio)->default_value(v.offload_ratio), kOffloadRatioHelp)
    ("speculative-update", po::value(&v.speculative_update)->default_value(v.speculative_update, "true"),
     "cpu_optimizer and cpu_full: update each unit on the CPU as its gradient lands during backward, as if "
     "clipping left it unchanged, into spare host memory; kept when the step's norm is within --grad-clip, "
     "redone otherwise (the result is the same either way)");
  // clang-format on
  add_device_memory_limit_flag(flags, v);
  add_aio_flags(flags, v.aio);
  add_zero_flags(flags, v.zero);
  add_loss_scaling_flags(flags, v);
  add_lora_flags(flags, v);
}

void add_lora_flags(po::options_description& flags, TrainingFlags& v, bool rank_flag) {
  if (rank_flag) {
    flags.add_options()("lora-rank", po::value(&v.lora_rank)->default_value(v.lora_rank), kLoraRankHelp);
  }
  // clang-format off
  flags.add_options()
    ("lora-alpha", po::value<double>()->notifier([&v](double x) { v.lora_alpha = x; }),
     "LoRA: the adapters' scale is alpha / rank (default: alpha = 2 x rank)")
    ("lora-dropout", po::value(&v.lora_dropout)->default_value(v.lora_dropout),
     "LoRA: dropout on the adapters' input (not the frozen layer's), in [0, 1): a new mask every micro-batch, "
     "drawn from the seed, the rank and the step")
    ("lora-targets", po::value(&v.lora_targets)->default_value(v.lora_targets),
     "LoRA: attention (the fused query/key/value projection, with one A shared by q, k and v, and the output "
     "projection), mlp (the MLP's input and output projections) or all")
    ("profile-dir", po::value(&v.profile_dir),
     "write a profile of chosen steps here (created if absent), per rank and recorded window: a Chrome trace for "
     "Perfetto (trace_*.json.gz: every kernel, collective, copy, host update and NVMe transfer), a summary "
     "(profile_*.txt, also printed: operations by total time, and each step's time split by what was exposed) "
     "and a timeline picture (timeline_*.svg). Without --profile-schedule, the last three steps of each run (the "
     "step before them warms the profiler up)")
    ("profile-schedule", po::value(&v.profile_schedule),
     "which steps --profile-dir records, as PyTorch's profiler schedule: skip_first=5,wait=2,warmup=1,active=3,"
     "repeat=2 skips steps 1-5, then repeats 2 idle, 1 warm-up and 3 recorded steps, twice: steps 9-11 and "
     "15-17 (repeat=0: to the end). Steps count from 1, warm-up included, as the step lines do");
  // clang-format on
}

void add_loss_scaling_flags(po::options_description& flags, TrainingFlags& v) {
  // clang-format off
  flags.add_options()
    ("loss-scale", po::value<double>()->notifier([&v](double x) { v.loss_scale = x; }),
     "fp16: 0 for a dynamic loss scale (the default), or a fixed scale (DeepSpeed fp16.loss_scale). The "
     "loss's gradient is multiplied by the scale and the update divides it out; a step whose gradients "
     "overflow (inf or NaN on any rank) is skipped on every rank")
    ("initial-scale-power", po::value<int>()->notifier([&v](int x) { v.initial_scale_power = x; }),
     "fp16, dynamic: the scale starts at 2^this, 0 to 127 (default 16)")
    ("loss-scale-window", po::value<int64_t>()->notifier([&v](int64_t x) { v.loss_scale_window = x; }),
     "fp16, dynamic: steps without an overflow after which the scale doubles (default 1000)")
    ("hysteresis", po::value<int>()->notifier([&v](int x) { v.hysteresis = x; }),
     "fp16, dynamic: overflows in a row before the scale halves (default 2)")
    ("min-loss-scale", po::value<double>()->notifier([&v](double x) { v.min_loss_scale = x; }),
     "fp16, dynamic: the scale halves no further; an overflow there ends the run as diverged (default 1)");
  // clang-format on
}

void add_aio_flags(po::options_description& flags, AioConfig& aio) {
  // clang-format off
  flags.add_options()
    ("aio-block-size", po::value(&aio.block_size)->default_value(aio.block_size), "bytes per NVMe request")
    ("aio-queue-depth", po::value(&aio.queue_depth)->default_value(aio.queue_depth),
     "NVMe requests in flight per thread")
    ("aio-intra-op-parallelism", po::value(&aio.intra_op_parallelism)->default_value(aio.intra_op_parallelism),
     "threads submitting one transfer's requests")
    ("aio-single-submit", po::value(&aio.single_submit)->default_value(aio.single_submit),
     "one request per submission call")
    ("aio-overlap-events", po::value(&aio.overlap_events)->default_value(aio.overlap_events),
     "refill the queue as requests complete");
  // clang-format on
}

void add_device_memory_limit_flag(po::options_description& flags, TrainingFlags& v) {
  flags.add_options()("device-memory-limit-gb",
                      po::value(&v.device_memory_limit_gb)->default_value(v.device_memory_limit_gb, "none"),
                      kDeviceMemoryLimitHelp);
}

void add_zero_flags(po::options_description& flags, ZeroConfig& z, bool stage_flag) {
  if (stage_flag) {
    flags.add_options()("zero-stage", po::value(&z.stage)->default_value(z.stage),
                        "ZeRO stage: 0 (data parallel), 1 (optimizer state partitioned), 2 (+ gradients), 3 (+ "
                        "parameters)");
  }
  // clang-format off
  flags.add_options()
    ("reduce-bucket-size", po::value(&z.reduce_bucket_size)->default_value(z.reduce_bucket_size),
     "stages 0-1: elements of gradient reduced together (DeepSpeed reduce_bucket_size)")
    ("allgather-bucket-size", po::value(&z.allgather_bucket_size)->default_value(z.allgather_bucket_size),
     "elements of updated parameters all-gathered together (DeepSpeed allgather_bucket_size)")
    ("overlap-comm", po::value<bool>()->notifier([&z](bool on) { z.overlap_comm = on; }),
     "reduce gradients while backward runs: true or false (DeepSpeed overlap_comm, whose default is true in "
     "stage 3 only; default here: true)")
    ("stage3-prefetch-bucket-size",
     po::value(&z.stage3_prefetch_bucket_size)->default_value(z.stage3_prefetch_bucket_size),
     "stage 3: elements of parameters gathered ahead of use (0: no prefetch)")
    ("stage3-param-persistence-threshold",
     po::value(&z.stage3_param_persistence_threshold)->default_value(z.stage3_param_persistence_threshold),
     "stage 3: units with fewer elements stay whole on every rank")
    ("pipelined-updates", po::value(&z.pipelined_updates)->default_value(z.pipelined_updates),
     "stages 1-3 without offload: each unit's optimizer update runs beside the next forward and its weights' "
     "gather follows it (true or false)")
    ("check-collectives", po::bool_switch(&z.check_collectives),
     "debugging: at the end of every step the ranks compare the collectives each issued (kind, unit, bytes, in "
     "order) and stop with the first that differs");
  // clang-format on
}

namespace {

// Runs parse(), prefixing any UsageError with the flag it came from.
template <typename Parse>
auto parse_flag(const char* flag, Parse parse) {
  try {
    return parse();
  } catch (const UsageError& e) {
    throw UsageError(cat("--", flag, ": ", e.what()));
  }
}

// Bounds that keep every size computed from the flags (tokens per micro-batch, their int32 positions) far
// from overflow.
constexpr int64_t kMaxTokensPerMicroBatch = int64_t(1) << 30;
constexpr int64_t kMaxCount = int64_t(1) << 30;

void require_positive(int64_t value, const char* flag) {
  if (value <= 0 || value > kMaxCount) {
    throw UsageError(cat("--", flag, ": must be an integer in [1, ", kMaxCount, "], got ", value));
  }
}

// A finite value in [lo, hi] that survives the conversion to float without becoming 0 or infinite.
float require_real(double value, const char* flag, double lo, double hi, bool zero_allowed) {
  const float narrow = float(value);
  const bool ok =
      std::isfinite(value) && lo <= value && value <= hi && std::isfinite(narrow) && (zero_allowed || narrow != 0.0f);
  if (!ok) {
    throw UsageError(cat("--", flag, ": must be a ", zero_allowed ? "" : "non-zero ", "number in [", lo, ", ", hi,
                         "] that fp32 can hold, got ", value));
  }
  return narrow;
}

LoraConfig lora_of(const TrainingFlags& f, const TransformerConfig& model) {
  const int64_t widest = std::min(model.d_model, model.d_ff);
  if (f.lora_rank < 0 || f.lora_rank > widest) {
    throw UsageError(cat("--lora-rank: must be an integer in [0, ", widest, "] for ", model.name, " (0: off), got ",
                         f.lora_rank));
  }
  if (f.lora_rank == 0) {
    if (f.lora_alpha) throw UsageError("--lora-alpha: needs --lora-rank above 0");
    if (f.lora_dropout != 0) throw UsageError("--lora-dropout: needs --lora-rank above 0");
    if (f.lora_targets != "attention") throw UsageError("--lora-targets: needs --lora-rank above 0");
    return {};
  }
  if (!(0 <= f.lora_dropout && f.lora_dropout < 1)) {
    throw UsageError(cat("--lora-dropout: must be a probability in [0, 1), got ", f.lora_dropout));
  }
  LoraConfig lora;
  lora.dropout = f.lora_dropout;
  lora.rank = f.lora_rank;
  lora.alpha = f.lora_alpha ? require_real(*f.lora_alpha, "lora-alpha", 0.0, 1e6, false) : 2.0 * double(f.lora_rank);
  try {
    lora.targets = parse_lora_targets(f.lora_targets);
  } catch (const Error& e) {
    throw UsageError(cat("--lora-targets: ", e.what()));
  }
  return lora;
}

Device resolve_device(const std::string& requested) {
  const int gpus = cuda_device_count();
  if (requested.empty()) return gpus > 0 ? Device::cuda(0) : Device::cpu();
  Device device = parse_flag("device", [&] { return parse_device(requested); });
  if (device.is_cuda() && device.index >= gpus) {
    throw UsageError(gpus == 0
                         ? cat("--device ", requested, ": no CUDA GPU is visible; use --device cpu")
                         : cat("--device ", requested, ": ", gpus, " GPU(s) visible (cuda:0 to cuda:", gpus - 1, ")"));
  }
  return device;
}

DType resolve_dtype(const std::string& requested, Device device) {
  if (requested.empty()) return device.is_cuda() ? DType::bf16 : DType::f32;
  const DType dtype = parse_flag("dtype", [&] { return parse_dtype(requested); });
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16) {
    throw UsageError("--dtype: accepted: bf16, fp16, fp32");
  }
  if (device.is_cpu() && dtype != DType::f32) {
    throw UsageError(cat("--dtype ", requested, ": the CPU backend computes in fp32 (accepted on cpu: fp32)"));
  }
  return dtype;
}

}  // namespace

LossScaling loss_scaling_of(const TrainingFlags& f, DType dtype) {
  LossScaling s;
  if (dtype != DType::f16) {
    const char* given = f.loss_scale            ? "loss-scale"
                        : f.initial_scale_power ? "initial-scale-power"
                        : f.loss_scale_window   ? "loss-scale-window"
                        : f.hysteresis          ? "hysteresis"
                        : f.min_loss_scale      ? "min-loss-scale"
                                                : nullptr;
    if (given) {
      throw UsageError(cat("--", given, ": loss scaling is for --dtype fp16 (", dtype_name(dtype),
                           " needs none: its range is fp32's)"));
    }
    return s;
  }
  s.enabled = true;
  if (f.loss_scale) s.static_scale = require_real(*f.loss_scale, "loss-scale", 0.0, 1e38, /*zero_allowed=*/true);
  if (f.initial_scale_power) {
    if (*f.initial_scale_power < 0 || *f.initial_scale_power > 127) {
      throw UsageError(cat("--initial-scale-power: must be an integer in [0, 127], got ", *f.initial_scale_power));
    }
    s.initial_scale_power = *f.initial_scale_power;
  }
  if (f.loss_scale_window) {
    require_positive(*f.loss_scale_window, "loss-scale-window");
    s.window = *f.loss_scale_window;
  }
  if (f.hysteresis) {
    require_positive(*f.hysteresis, "hysteresis");
    s.hysteresis = *f.hysteresis;
  }
  if (f.min_loss_scale) s.min_scale = require_real(*f.min_loss_scale, "min-loss-scale", 0.0, 1e38, false);
  validate(s);  // the same rules as a DeepSpeed config's values meet
  return s;
}

void require_writable_folder(const std::string& path, const char* flag) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec || !std::filesystem::is_directory(path)) {
    throw UsageError(cat("--", flag, " ", path, ": cannot be created as a folder", ec ? ": " + ec.message() : ""));
  }
  if (::access(path.c_str(), W_OK) != 0) throw UsageError(cat("--", flag, " ", path, ": not writable"));
}

TrainingRun validate_training_flags(const TrainingFlags& f) {
  TrainingRun run;
  TrainingOptions& o = run.options;
  o.model = resolve_model(f.model);
  require_positive(f.batch_size, "batch-size");
  require_positive(f.num_steps, "num-steps");
  require_positive(f.grad_accum, "grad-accum");
  if (f.seq_length && *f.seq_length <= 0) {
    throw UsageError(cat("--seq-length: must be a positive integer, got ", *f.seq_length));
  }
  o.model.lora = lora_of(f, o.model);
  o.batch = f.batch_size;
  o.seq = f.seq_length.value_or(std::min<int64_t>(512, o.model.max_seq_len));
  if (const std::string problem = sequence_length_problem(o.model, o.seq); !problem.empty()) {
    throw UsageError(cat("--seq-length: ", problem));
  }
  if (o.batch > kMaxTokensPerMicroBatch / o.seq) {
    throw UsageError(cat("--batch-size: ", o.batch, " x --seq-length ", o.seq, " exceeds ", kMaxTokensPerMicroBatch,
                         " tokens per micro-batch"));
  }
  o.grad_accum = f.grad_accum;
  parse_flag("optimizer", [&] { set_optimizer(o.optimizer, f.optimizer); });
  o.optimizer.lr = require_real(f.lr, "lr", 0.0, 1e3, /*zero_allowed=*/false);
  o.optimizer.weight_decay = f.weight_decay ? require_real(*f.weight_decay, "weight-decay", 0.0, 1e3, true)
                             : o.optimizer.kind == OptimizerKind::adamw ? 0.01f
                                                                        : 0.0f;
  o.optimizer.momentum = require_real(f.momentum, "momentum", 0.0, 0.999999, true);
  o.grad_clip = require_real(f.grad_clip, "grad-clip", 0.0, 1e30, true);
  if (f.seed < 0) throw UsageError(cat("--seed: must be a non-negative integer, got ", f.seed));
  o.seed = uint64_t(f.seed);
  run.device = resolve_device(f.device);
  o.dtype = resolve_dtype(f.dtype, run.device);
  o.loss_scaling = loss_scaling_of(f, o.dtype);
  o.activation_checkpointing =
      parse_flag("activation-checkpointing", [&] { return parse_activation_checkpointing(f.activation_checkpointing); });
  run.num_steps = f.num_steps;
  run.data_glob = f.data;
  run.data_format = parse_token_file_format(f.data_format);  // its message names --data-format
  validate(f.zero);                                          // its messages name the flags
  o.zero = f.zero;
  o.offload = parse_flag("offload", [&] { return parse_offload_strategy(f.offload); });
  validate(f.aio);  // its messages name the settings
  o.aio = f.aio;
  if (o.offload == OffloadStrategy::nvme) {
    if (f.nvme_path.empty()) throw UsageError("--offload nvme needs --nvme-path FOLDER");
    std::error_code ec;
    if (!std::filesystem::is_directory(f.nvme_path, ec))
      throw UsageError(cat("--nvme-path ", f.nvme_path, ": not a folder"));
    if (::access(f.nvme_path.c_str(), W_OK) != 0) throw UsageError(cat("--nvme-path ", f.nvme_path, ": not writable"));
  }
  o.nvme_path = f.nvme_path;
  parse_flag("offload-ratio", [&] { validate_offload_ratio(f.offload_ratio, o.offload); });
  o.offload_ratio = f.offload_ratio;
  o.speculative_update = f.speculative_update;
  if (!f.profile_schedule.empty()) {
    if (f.profile_dir.empty()) throw UsageError("--profile-schedule: needs --profile-dir DIR (where the traces go)");
    run.profile.schedule = ProfileSchedule::parse(f.profile_schedule);
  }
  if (!f.profile_dir.empty()) require_writable_folder(f.profile_dir, "profile-dir");
  if (!(f.device_memory_limit_gb >= 0) || !std::isfinite(f.device_memory_limit_gb) ||
      f.device_memory_limit_gb > 1e6) {
    throw UsageError(cat("--device-memory-limit-gb: must be a size in GB, above 0 (0: no cap), got ",
                         f.device_memory_limit_gb));
  }
  if (f.device_memory_limit_gb > 0) run.device_memory_limit = size_t(f.device_memory_limit_gb * 1e9);
  run.profile.dir = f.profile_dir;
  return run;
}

std::unique_ptr<TokenSource> make_token_source(const TrainingRun& run, int rank, int world) {
  const BatchGeometry geometry{run.options.batch, run.options.seq, rank, world};
  if (run.data_glob.empty()) return make_synthetic_tokens(geometry, run.options.model.vocab_size, run.options.seed);
  try {
    return make_file_tokens(run.data_glob, run.data_format, geometry, run.options.model.vocab_size);
  } catch (const IoError& e) {  // a bad file named on the command line is bad input: refused before training
    throw UsageError(cat("--data: ", e.what()));
  }
}

int run_program(int argc, char** argv, const std::string& usage, po::options_description& flags,
                const std::function<int()>& body) {
  return run_program(argc, argv, usage, flags, [&](const po::variables_map&) { return body(); });
}

int run_program(int argc, char** argv, const std::string& usage, po::options_description& flags,
                const std::function<int(const po::variables_map&)>& body) {
  flags.add_options()("help,h", "print this help and exit");
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(flags).run(), vm);
    if (vm.count("help")) {
      std::cout << usage << "\n\n" << flags << "\n" << backend_options_help();
      return 0;
    }
    po::notify(vm);
    // The backend options are read here, once: a bad value is bad input too.
    parsed_backend_options() = BackendOptions::from_environment();
    set_log_level(parsed_backend_options().log_level);
    return body(vm);
  } catch (const po::error& e) {
    std::cerr << "error: " << e.what() << " (see --help)\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

Device device_for_rank(Device device, const MpiWorld& world) {
  if (world.size() == 1 || !device.is_cuda()) return device;
  if (world.local_size() > cuda_device_count()) {
    throw UsageError(cat("mpirun started ", world.local_size(), " ranks on ", world.host_name(), ", which has ",
                         cuda_device_count(), " GPU(s): at most one rank per GPU"));
  }
  return Device::cuda(world.local_rank());
}

}  // namespace zb
