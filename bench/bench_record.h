// BenchRecord: what one configuration of zero_bench or offload_bench measured, and its outcome. One flat
// JSON object per configuration, in a fixed column order, so that a results file is an array that
// pandas.DataFrame(json.load(f)) turns into a row per configuration, and the CSV has the same columns.
// Absent values (MFU without a known peak, NVMe rates without NVMe, everything of a failed run) are null in
// JSON and empty in CSV.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/configuration_label.h"
#include "bench/rank_results.h"

namespace zb {

// Where and with what a run was made: the same for every record of one run.
struct RunEnvironment {
  std::string gpu_name;  // "CPU" on the CPU backend
  int gpu_count = 0;     // GPUs used by the job (its ranks)
  std::string driver_version, cuda_version, nccl_version, mpi_version;
  std::string host_name, machine_name, cloud_provider;  // the last two from MACHINE_NAME, CLOUD_PROVIDER
  std::string git_commit, timestamp;                    // timestamp: ISO 8601, UTC
  // The GPU backend's choices, "attention=cudnn gemm_algorithms=timed ..." (BackendOptions::summary); empty on
  // the CPU backend, which has one implementation of each op.
  std::string backend_options;
};

struct BenchRecord {
  // The configuration.
  int stage = 0;
  std::string strategy = "none";  // with its offload ratio where below 1: "cpu_optimizer:0.8"
  double offload_ratio = 1.0;     // the share of the optimizer state asked to be offloaded (1 without offload too)
  double offloaded_share = 0.0;   // the share offloaded: whole units stay on the GPU, so it may exceed the ratio
  int repeat = 1;                 // how many times it ran (the step statistics pool every run's timed steps)
  std::string model;
  int64_t parameters = 0;
  int world_size = 1;
  int64_t batch_size = 0, seq_length = 0, grad_accum = 1;
  std::string dtype;
  std::string activation_checkpointing = "none";  // none, full or selective (models/activation_checkpointing.h)
  std::string optimizer = "adamw";  // adamw, adam, sgd, adamw8bit or adam8bit (OptimizerParams)
  std::string lora = "none";        // "none", or the adapters: "rank 16, alpha 32, attention" (lora_description)
  int64_t lora_rank = 0;            // the adapters' rank (0: no LoRA)
  int64_t trainable_parameters = 0;  // the weights trained (the adapters' under LoRA; else every one)
  int64_t frozen_parameters = 0;     // the weights only read (the base model's under LoRA; else none)
  // The outcome: "ok", "oom", "error" or "interrupted"; error holds the message of the rank that failed.
  std::string status = "ok";
  std::string error;
  // Out of memory: the pool that asked and the bytes it asked for (the failing rank's, where known).
  std::string oom_pool;
  std::optional<int64_t> oom_bytes;

  // Step time over the timed steps (after warm-up) of every repeat, in ms, less the steps a profile traced
  // (profile_steps; unless no other step was timed); stddev is of the repeats' means, step_time_stddev_ms of
  // every timed step of every repeat (the spread the recommendation treats as noise).
  std::optional<double> avg_step_time_ms, p50_step_ms, p90_step_ms, min_step_ms, max_step_ms, stddev_step_ms;
  std::optional<double> step_time_stddev_ms;
  std::optional<double> throughput_tokens_per_sec, throughput_tokens_per_sec_per_gpu, throughput_stddev;
  std::optional<double> samples_per_sec, tflops_per_gpu, mfu;
  // GPU memory, GB (1e9 bytes), the worst rank's: peak and still allocated at the end, and peak by pool,
  // measured by the engine's allocator and predicted by the engine's memory plan (engine/memory_plan.h; each pool's
  // own peak, the worst rank's), the backend's workspace (backend_workspace_gb, measured at the end) given to it.
  std::optional<double> gpu_peak_gb, gpu_allocated_gb, gpu_capacity_gb;
  // --device-memory-limit-gb: the card size asked for, and what the device held outside the engine when the
  // configuration started (the CUDA context, libraries; the worst rank's), which the cap leaves out of the engine's
  // share (bench/device_memory_cap.h).
  std::optional<double> device_memory_limit_gb, device_memory_outside_gb;
  std::optional<double> parameters_gb, gradients_gb, optimizer_state_gb, activations_gb, workspace_gb;
  std::optional<double> predicted_parameters_gb, predicted_gradients_gb, predicted_optimizer_state_gb;
  std::optional<double> predicted_activations_gb, predicted_workspace_gb, predicted_gpu_peak_gb;
  std::optional<double> backend_workspace_gb;          // the backend's GEMM workspaces and scratch
  // A GPU's memory in use outside the engine's allocator at the end of the steps (the CUDA context, the libraries'
  // handles and buffers, NCCL's; other programs), the worst rank's: what a plan adds to the engine's peak.
  std::optional<double> gpu_outside_engine_gb;
  std::optional<double> cpu_memory_gb, cpu_pinned_gb;  // peak resident set, and the offload's host memory
  std::optional<double> nvme_read_gb, nvme_write_gb, nvme_read_gbps, nvme_write_gbps;  // per step
  std::optional<double> comm_bytes_per_step;                                           // collectives' payload per rank
  // Per-phase times per step, ms.
  std::optional<double> forward_ms, backward_ms, optimizer_ms, exposed_comm_ms;
  std::optional<double> offload_to_host_ms, offload_cpu_optimizer_ms, offload_to_device_ms, offload_wait_ms;
  // The host's speculative updates during backward (in-memory offload): the CPU time of those kept (part of
  // offload_cpu_optimizer_ms) and of those dropped because the step's update differed from the one assumed
  // (clipping, a loss scale, a skipped step: that work done again).
  std::optional<double> offload_speculation_kept_ms, offload_speculation_discarded_ms;
  std::optional<double> nvme_read_ms, nvme_write_ms;
  std::optional<double> loss_first, loss_last;
  // With loss scaling (fp16): the last step's loss scale and the steps skipped for an overflow (warm-up
  // included, summed over the repeats).
  std::optional<double> loss_scale;
  std::optional<int64_t> skipped_steps;
  // With --profile-dir: the mean time of the first recorded window's steps (profile_steps, "9-11") exposed per
  // category, as its summary splits them (bench/profile_summary.h; this rank's: rank 0 writes the record), and
  // the category with the most ("compute", ..., "idle").
  std::optional<double> exposed_compute_ms, exposed_collectives_ms, exposed_copies_ms, exposed_cpu_optimizer_ms,
      exposed_nvme_ms, exposed_idle_ms;
  std::string profile_steps, profile_bottleneck;
  std::optional<double> cost_per_1000_samples_usd;  // with --gpu-hour-usd
  std::optional<double> efficiency;                 // tokens/s per peak GPU GB
  std::string recommendation;

  // Every rank's own figures (rank order), how far apart they are, and the throughput of each host.
  std::vector<RankResult> per_rank;
  std::optional<double> rank_step_spread_pct, rank_busy_spread_pct;  // see rank_results.h
  std::optional<int> slowest_rank;
  std::string rank_spread_note;  // "rank 3 is 7.1% slower than rank 0: ..." above kRankSpreadFlagPct, else ""
  std::vector<NodeThroughput> node_throughput;

  RunEnvironment environment;
  bool names_strategy = false;  // offload_bench: its labels name the strategy even when it is none

  bool ok() const { return status == "ok"; }
  std::string label() const;  // how tables name it: see configuration_label
};


// What 1,000 samples cost on `gpus` GPUs at `gpu_hour_usd` a GPU-hour, training `samples_per_second` (the
// records' measured figure, the planner's predicted one).
inline double cost_per_1000_samples_usd(double gpu_hour_usd, int gpus, double samples_per_second) {
  return gpu_hour_usd * gpus / 3600.0 * (1000.0 / samples_per_second);
}

// A run's noise: the standard deviation of its step times over their mean (0 where either is missing), as the
// recommendation and the regression check compare runs.
double relative_step_spread(const std::optional<double>& step_time_stddev_ms, const std::optional<double>& mean_ms);

nlohmann::ordered_json to_json(const BenchRecord& record);
// A results file's text: the records as a JSON array, indented, ending in a newline.
std::string records_json_text(const std::vector<BenchRecord>& records);
// The records as CSV: a header line of the JSON's keys, then one line a record (RFC 4180 quoting). The
// nested keys (per_rank, node_throughput) are left out: the spread figures and the slowest host's throughput
// stand for them.
std::string to_csv(const std::vector<BenchRecord>& records);

}  // namespace zb
