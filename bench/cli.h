// Command-line plumbing shared by the programs: the training flags (Boost.Program_options), their
// validation into TrainingOptions, and the exit-code policy (bad input: 2, failure: 1).
#pragma once

#include <boost/program_options.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "bench/profile_options.h"
#include "comm/mpi_world.h"
#include "core/device.h"
#include "engine/token_source.h"
#include "engine/trainer.h"
#include "kernels/backend_options.h"

namespace zb {

// The raw values of the training flags, as parsed.
struct TrainingFlags {
  std::string model = "gpt2";
  int64_t batch_size = 4;
  std::optional<int64_t> seq_length;  // absent: min(512, the model's maximum)
  int64_t num_steps = 20;
  int64_t grad_accum = 1;
  double lr = 3e-4;
  std::string optimizer = "adamw";
  std::optional<double> weight_decay;  // absent: the optimizer's torch default (0.01 for adamw, 0 otherwise)
  double momentum = 0.9;
  double grad_clip = 1.0;
  int64_t seed = 42;
  std::string device;  // empty: cuda:0 when a GPU is visible, otherwise cpu
  std::string dtype;   // empty: bf16 on a GPU, fp32 on the CPU
  std::string data;    // empty: synthetic tokens
  std::string data_format = "llmc";
  ZeroConfig zero;
  std::string offload = "none";
  std::string nvme_path;
  double offload_ratio = 1.0;
  AioConfig aio;
  bool speculative_update = true;
  std::string activation_checkpointing = "none";
  // LoRA (models/lora.h): rank 0 is off; alpha absent: twice the rank.
  int64_t lora_rank = 0;
  std::optional<double> lora_alpha;
  double lora_dropout = 0.0;
  std::string lora_targets = "attention";
  // fp16's loss scaling under DeepSpeed's names (fp16.loss_scale, ...); absent: DeepSpeed's defaults.
  std::optional<double> loss_scale, min_loss_scale;
  std::optional<int> initial_scale_power, hysteresis;
  std::optional<int64_t> loss_scale_window;
  std::string profile_dir, profile_schedule;  // empty: no profile; the last three steps
  double device_memory_limit_gb = 0;          // 0: none (bench/device_memory_cap.h)
};

// The help of --dtype, shared by every program.
inline constexpr const char* kOptimizerHelp =
    "adamw, adam, sgd, or adamw8bit and adam8bit: Adam's moments in 8 bits (block-wise quantized, a scale a block "
    "of 2048), the master weights fp32";
inline constexpr const char* kDtypeHelp =
    "bf16 (mixed precision: bf16 weights, activations and gradients, fp32 master weights and optimizer state), "
    "fp16 (the same in fp16, with a loss scale: see --loss-scale; GPU only) or fp32";

// The help of --model, shared by every program that takes one.
inline constexpr const char* kModelFlagHelp =
    "model name (gpt2, gpt2-medium, gpt2-large, gpt2-xl, facebook/opt-1.3b, meta-llama/Llama-2-7b-hf, "
    "meta-llama/Llama-2-13b-hf, meta-llama/Llama-2-70b-hf, meta-llama/Llama-3.2-1B, mistralai/Mistral-7B-v0.3, "
    "mistralai/Mistral-7B-Instruct-v0.3, google/gemma-3-1b-pt, google/gemma-3-1b-it, gpt2-tiny, llama-tiny, "
    "gemma3-tiny), "
    "or a Hugging Face config.json or a folder holding one";

// The help of --lora-rank, shared by every program.
inline constexpr const char* kLoraRankHelp =
    "LoRA: train rank-R adapters beside the frozen model (0: off, every weight trained); the base weights get no "
    "gradient and no optimizer state, ZeRO partitions the adapters' gradients and state (stage 3 the frozen weights "
    "too)";

// The help of --activation-checkpointing, shared by every program.
inline constexpr const char* kActivationCheckpointingHelp =
    "which activations each transformer block keeps for its backward: none (all); full (only its input: its "
    "backward first runs its forward again, about a third more compute); selective (its input, q/k/v and the "
    "MLP's input projection: the norms, the attention with its output projection and the MLP's activation "
    "are recomputed). Every mode trains to the same result (bit for bit; on the GPU, selective with GELU "
    "models within bf16 rounding, as it applies GELU after the GEMM rather than in its epilogue)";

// The help of --offload-ratio, shared by train and zero_bench.
inline constexpr const char* kOffloadRatioHelp =
    "cpu_optimizer and nvme: the share of the optimizer state offloaded, in (0, 1] (DeepSpeed's "
    "offload_optimizer.ratio); below 1, the model's first units (in forward order, each that still fits "
    "within 1 - ratio of the elements, so possibly fewer) keep their fp32 master weights and moments on the "
    "GPU, and the GPU updates them while the CPU updates the others";

void add_training_flags(boost::program_options::options_description& flags, TrainingFlags& values);
// The ZeRO knobs under DeepSpeed's names (dashes for underscores) and defaults; part of add_training_flags.
// (stage_flag: with --zero-stage; the comparison programs choose stages with their own flags.)
void add_zero_flags(boost::program_options::options_description& flags, ZeroConfig& values, bool stage_flag = true);
// DeepSpeed's aio settings under its names; part of add_training_flags.
void add_aio_flags(boost::program_options::options_description& flags, AioConfig& values);
// --device-memory-limit-gb (bench/device_memory_cap.h); part of add_training_flags.
void add_device_memory_limit_flag(boost::program_options::options_description& flags, TrainingFlags& values);
// --lora-rank (where rank_flag), --lora-alpha, --lora-dropout, --lora-targets, and --profile-dir and
// --profile-schedule; part of add_training_flags.
void add_lora_flags(boost::program_options::options_description& flags, TrainingFlags& values, bool rank_flag = true);
// fp16's loss scaling under DeepSpeed's names (dashes for underscores) and defaults; part of add_training_flags.
void add_loss_scaling_flags(boost::program_options::options_description& flags, TrainingFlags& values);

// fp16's loss scaling from the flags, DeepSpeed's defaults where absent; off for other dtypes, which refuse the
// flags. Throws UsageError naming the flag.
LossScaling loss_scaling_of(const TrainingFlags& flags, DType dtype);

// The validated run: every check that needs no training happens here, so bad input fails before any work.
struct TrainingRun {
  TrainingOptions options;
  Device device;
  int64_t num_steps = 0;
  std::string data_glob;
  TokenFileFormat data_format = TokenFileFormat::llmc;
  ProfileOptions profile;
  std::optional<size_t> device_memory_limit;  // bytes: the card to run as (bench/device_memory_cap.h)
};

// Throws UsageError naming the flag and what it accepts.
TrainingRun validate_training_flags(const TrainingFlags& flags);
// Creates the folder `path` if absent; throws UsageError naming --flag where it cannot be made or written.
void require_writable_folder(const std::string& path, const char* flag);

// Under mpirun with GPUs, each rank takes the GPU numbered by its place on its node (at most one rank per
// GPU); otherwise `device` as it is.
Device device_for_rank(Device device, const MpiWorld& world);

// The token source the run asks for, for this rank.
std::unique_ptr<TokenSource> make_token_source(const TrainingRun& run, int rank = 0, int world = 1);

// Parses argv into `flags` (with --help, which also lists the backend options) and the backend options from
// the environment (kernels/backend_options.h; they set the log level at once), then calls body. Maps
// UsageError and parse errors to exit code 2, other errors to 1, printing "error: ..." on stderr.
int run_program(int argc, char** argv, const std::string& usage, boost::program_options::options_description& flags,
                const std::function<int()>& body);
// The same, for a body that needs to know which flags were given (vm[name].defaulted() when not).
int run_program(int argc, char** argv, const std::string& usage, boost::program_options::options_description& flags,
                const std::function<int(const boost::program_options::variables_map&)>& body);
// The backend options run_program read (the defaults before it runs): what a program hands to the backends it
// builds and writes into its records.
const BackendOptions& program_backend_options();

}  // namespace zb
