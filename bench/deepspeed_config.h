// DeepSpeed JSON configs for the comparison benchmarks: zero_bench and offload_bench read the settings they
// share with DeepSpeed from the user's --config file, and write the recommended setup back as a config that
// DeepSpeed takes without edits.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace zb {

// The settings of a DeepSpeed config that the benchmarks use. A key that is absent, null or "auto" (the
// Hugging Face integration's placeholder) stays unset, so that the caller's own default applies.
struct DeepSpeedConfig {
  std::optional<int> stage;                      // zero_optimization.stage, 0 to 3
  std::optional<std::string> offload_optimizer;  // zero_optimization.offload_optimizer.device: "none", "cpu" or "nvme"
  std::optional<std::string> offload_param;      // zero_optimization.offload_param.device: "none", "cpu" or "nvme"
  // zero_optimization.offload_optimizer.ratio, in (0, 1]: the share of the optimizer state offloaded. (DeepSpeed
  // applies it in stage 3 only; the engine in every stage.)
  std::optional<double> offload_ratio;
  // The NVMe folder of whichever offload goes to "nvme" (the engine has one; two different paths are refused).
  std::optional<std::string> nvme_path;
  std::optional<int64_t> micro_batch;  // train_micro_batch_size_per_gpu
  std::optional<int64_t> grad_accum;   // gradient_accumulation_steps
  // train_batch_size, the global batch: micro_batch * grad_accum * data-parallel size. Kept as read, since
  // without the world size it cannot become a micro-batch; the caller that knows the size may derive one.
  std::optional<int64_t> train_batch;
  // "bf16" or "fp16" from bf16.enabled / fp16.enabled; "fp32" where one of them says false and neither true.
  std::optional<std::string> precision;
  // The fp16 section's loss scaling, read where fp16 is enabled and written with it (engine/loss_scaler.h):
  // loss_scale (0: dynamic), initial_scale_power, loss_scale_window, hysteresis, min_loss_scale.
  std::optional<double> loss_scale;
  std::optional<int> initial_scale_power;
  std::optional<int64_t> loss_scale_window;
  std::optional<int> hysteresis;
  std::optional<double> min_loss_scale;
  std::optional<int64_t> reduce_bucket_size, allgather_bucket_size;                        // elements
  std::optional<int64_t> stage3_prefetch_bucket_size, stage3_param_persistence_threshold;  // elements
  std::optional<bool> overlap_comm;
  std::optional<int64_t> aio_block_size;                      // aio.block_size, bytes
  std::optional<int> aio_queue_depth;                         // aio.queue_depth
  std::optional<int> aio_intra_op_parallelism;                // aio.intra_op_parallelism (older: thread_count)
  std::optional<bool> aio_single_submit, aio_overlap_events;  // aio.single_submit, aio.overlap_events
  std::optional<double> gradient_clipping;                    // the global norm; 0 turns clipping off
  // "adamw", "adam" or "sgd" from optimizer.type: Adam and AdamW in any case, SGD as torch.optim spells it
  // (DeepSpeed looks up names not its own there). DeepSpeed's "Adam" is AdamW unless
  // optimizer.params.adam_w_mode is false, so it reads as "adamw" then.
  std::optional<std::string> optimizer;
  std::optional<double> lr, weight_decay;  // optimizer.params: read only with optimizer.type, as DeepSpeed does
  // "full" where the config has an activation_checkpointing section (DeepSpeed's checkpointing of whole
  // blocks, which the model code calls), unset otherwise. Written back for "full" and "selective" alike: a
  // DeepSpeed config cannot ask for selective recomputation (a model's own code chooses what it recomputes),
  // and checkpointing whole blocks is the nearest that keeps the memory within what the run used.
  std::optional<std::string> activation_checkpointing;

  friend bool operator==(const DeepSpeedConfig&, const DeepSpeedConfig&) = default;
};

// Reads `json`, a whole DeepSpeed config. Keys outside the settings above are ignored (configs carry many).
// Throws UsageError, its message starting with `source` (e.g. "--config ds.json") and naming the key, for a
// wrong type or value, for fp16 and bf16 both enabled, for activation_checkpointing.cpu_checkpointing (the
// checkpoints in host memory; not supported), for an offload its stage cannot have (optimizer offload
// below stage 1, parameter offload below stage 3), and for "nvme" without nvme_path. (The batch sizes agree or
// not according to the GPU count: deepspeed_batch.)
DeepSpeedConfig parse_deepspeed_config(const nlohmann::json& json, const std::string& source);

// parse_deepspeed_config of the file at `path` (JSON; comments allowed, as DeepSpeed's hjson reader allows
// them; a key twice in one object is refused, as DeepSpeed refuses it). An unreadable file or malformed
// JSON is a UsageError naming the path.
DeepSpeedConfig read_deepspeed_config(const std::string& path);

// The micro-batch and accumulation a config asks for on `world` GPUs, as DeepSpeed derives them
// (deepspeed/runtime/config.py): train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps *
// world; given two, the third follows (accumulation 1 when only one is given); given all three they must agree.
// nullopt when the config gives none of them. Throws UsageError naming the keys when they cannot agree on this
// world size (a global batch that the GPUs and the other value do not divide, or three that disagree).
struct DeepSpeedBatch {
  int64_t micro_batch = 1, grad_accum = 1;
};
std::optional<DeepSpeedBatch> deepspeed_batch(const DeepSpeedConfig& config, int world, const std::string& source);

// `config` as a DeepSpeed config that DeepSpeed accepts as it is: only keys DeepSpeed knows (its ZeRO section
// forbids any other), integers where DeepSpeed wants integers, unset settings left out so DeepSpeed's
// defaults apply. Settings the stage cannot use are left out: offload_param and stage3_* below stage 3,
// offload_optimizer below stage 1. Offloads pin their host memory. train_batch_size is written only without
// micro_batch (with it, DeepSpeed derives the global batch itself and a stale one would fail its check).
// Note that DeepSpeed's Adam and AdamW default to weight_decay 0, not torch's 0.01: set weight_decay to match
// a run. Throws zb::Error for a config DeepSpeed would refuse: no micro_batch and no train_batch, "nvme"
// without nvme_path, an offload ratio below 1 outside stage 3 (DeepSpeed: "Partial offloading only supported
// for ZeRO Stage 3"), or a value outside the ones listed above.
nlohmann::json deepspeed_config_json(const DeepSpeedConfig& config);

}  // namespace zb
