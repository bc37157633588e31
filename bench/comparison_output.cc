#include "bench/comparison_output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "bench/deepspeed_config.h"
#include "bench/run_environment.h"
#include "bench/svg_chart.h"
#include "bench/text_table.h"
#include "core/errors.h"
#include "core/strings.h"

namespace zb {

namespace {

// A float setting as the decimal it was given as (0.0003, not 0.0003000000142492354).
double as_decimal(float value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.7g", double(value));
  return std::strtod(text, nullptr);
}

std::string gb(const std::optional<double>& value) {
  if (!value) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.3g GB", *value);
  return text;
}

}  // namespace

// The DeepSpeed settings of one of our configurations.
DeepSpeedConfig deepspeed_settings(const TrainingOptions& o) {
  DeepSpeedConfig ds;
  ds.stage = o.zero.stage;
  const bool nvme = o.offload == OffloadStrategy::nvme;
  ds.offload_optimizer = o.offload == OffloadStrategy::none ? "none" : nvme ? "nvme" : "cpu";
  ds.offload_param = o.offload == OffloadStrategy::cpu_full ? "cpu" : "none";
  if (nvme) ds.nvme_path = o.nvme_path;
  // DeepSpeed refuses a partial optimizer offload below stage 3: there the nearest config it takes offloads all
  // of it (deepspeed_caveat says so).
  if (o.offload_ratio < 1 && o.zero.stage == 3) ds.offload_ratio = o.offload_ratio;
  ds.micro_batch = o.batch;
  ds.grad_accum = o.grad_accum;
  ds.precision = o.dtype == DType::bf16 ? "bf16" : o.dtype == DType::f16 ? "fp16" : "fp32";
  if (o.dtype == DType::f16) {
    const LossScaling& s = o.loss_scaling;
    ds.loss_scale = s.static_scale;
    ds.initial_scale_power = s.initial_scale_power;
    ds.loss_scale_window = s.window;
    ds.hysteresis = s.hysteresis;
    ds.min_loss_scale = s.min_scale;
  }
  ds.reduce_bucket_size = o.zero.reduce_bucket_size;
  ds.allgather_bucket_size = o.zero.allgather_bucket_size;
  ds.overlap_comm = o.zero.overlaps();
  ds.stage3_prefetch_bucket_size = o.zero.stage3_prefetch_bucket_size;
  ds.stage3_param_persistence_threshold = o.zero.stage3_param_persistence_threshold;
  if (nvme) {
    ds.aio_block_size = o.aio.block_size;
    ds.aio_queue_depth = o.aio.queue_depth;
    ds.aio_intra_op_parallelism = o.aio.intra_op_parallelism;
    ds.aio_single_submit = o.aio.single_submit;
    ds.aio_overlap_events = o.aio.overlap_events;
  }
  ds.gradient_clipping = as_decimal(o.grad_clip);
  // (DeepSpeed's config names no 8-bit optimizer: an 8-bit AdamW is given to deepspeed.initialize as the
  // optimizer instead, and the config's optimizer section then left out. Written as the AdamW it quantizes.)
  ds.optimizer = std::string(optimizer_kind_name(o.optimizer.kind));
  ds.lr = as_decimal(o.optimizer.lr);
  ds.weight_decay = as_decimal(o.optimizer.weight_decay);
  if (o.activation_checkpointing != ActivationCheckpointing::none)
    ds.activation_checkpointing = std::string(activation_checkpointing_name(o.activation_checkpointing));
  return ds;
}

std::string reserve_comparison_base(const std::string& output_dir, const std::string& stem) {
  // (A valid, empty results file until the first write.)
  return claim_new_file(cat(output_dir, "/", stem, "_", utc_now("%Y%m%d_%H%M%S")), ".json", "[]\n");
}

ComparisonFiles write_comparison(const std::string& base, const std::string& title,
                                 const std::vector<BenchRecord>& records, const TrainingOptions* recommended,
                                 std::optional<double> gpu_capacity_gb, bool on_gpu) {
  ComparisonFiles files{base + ".json", base + ".csv", base + ".svg", ""};
  std::vector<ChartBar> bars;
  for (const BenchRecord& r : records) {
    bars.push_back({r.label(), r.status, r.throughput_tokens_per_sec.value_or(0), r.throughput_stddev.value_or(0),
                    r.gpu_peak_gb.value_or(0)});
  }
  write_file_atomically(files.json, records_json_text(records));
  write_file_atomically(files.csv, to_csv(records));
  write_file_atomically(files.chart, render_comparison_chart(title, bars, gpu_capacity_gb.value_or(0), on_gpu));
  if (recommended) {
    const std::filesystem::path path(base);
    files.recommended_config = (path.parent_path() / ("ds_config_" + path.filename().string() + ".json")).string();
    write_file_atomically(files.recommended_config,
                          deepspeed_config_json(deepspeed_settings(*recommended)).dump(2) + "\n");
  }
  return files;
}

std::string deepspeed_caveat(const TrainingOptions& o) {
  std::vector<std::string> caveats;
  if (o.offload != OffloadStrategy::none && o.zero.stage == 0) {
    caveats.push_back("DeepSpeed offloads nothing in stage 0: the config leaves the offload out (use stage 1 or more)");
  } else if (o.offload == OffloadStrategy::cpu_full && o.zero.stage < 3) {
    caveats.push_back("DeepSpeed offloads parameters only in stage 3: the config offloads the optimizer alone");
  } else if (o.offload_ratio < 1 && o.zero.stage < 3) {
    caveats.push_back(
        cat("DeepSpeed offloads a part of the optimizer state in stage 3 only (\"Partial offloading only supported "
            "for ZeRO Stage 3\"): the config offloads all of it, where this run kept ",
            int(std::lround(100 * (1 - o.offload_ratio))), "% on the GPU; stage 3 takes the ratio"));
  }
  if (o.activation_checkpointing == ActivationCheckpointing::selective) {
    caveats.push_back(
        "a DeepSpeed config cannot ask for selective recomputation: its activation_checkpointing section, "
        "which the model's code uses, checkpoints whole blocks (more recompute, less memory)");
  }
  if (o.model.lora.enabled()) {
    caveats.push_back(cat("LoRA is not a DeepSpeed setting: the model's code adds the adapters (",
                          lora_description(o.model.lora), ") and freezes the rest, as PEFT's LoraConfig does"));
  }
  return join(caveats, "; ");
}

std::string summary_table(const std::vector<BenchRecord>& records, bool on_gpu) {
  // The ranks' spread only where there are several ranks.
  const bool spread = std::any_of(records.begin(), records.end(), [](const BenchRecord& r) { return r.world_size > 1; });
  // The CPU backend's device is the host: its tracked allocations are "device" memory there.
  std::vector<std::vector<std::string>> rows{
      {"Strategy", on_gpu ? "GPU Mem" : "Device Mem", "CPU Mem", "Time", "Throughput"}};
  if (spread) rows[0].push_back("Rank spread");
  rows[0].insert(rows[0].end(), {"Status", "Recommendation"});
  for (const BenchRecord& r : records) {
    char time[32] = "-", rate[32] = "-", ranks[48] = "-";
    if (r.avg_step_time_ms) std::snprintf(time, sizeof time, "%.1f ms", *r.avg_step_time_ms);
    if (r.throughput_tokens_per_sec) std::snprintf(rate, sizeof rate, "%.0f tok/s", *r.throughput_tokens_per_sec);
    if (r.rank_step_spread_pct && r.rank_busy_spread_pct) {
      // The larger of the two spreads; flagged with the slow rank above the threshold.
      const double pct = std::max(*r.rank_step_spread_pct, *r.rank_busy_spread_pct);
      if (r.rank_spread_note.empty()) std::snprintf(ranks, sizeof ranks, "%.1f%%", pct);
      else std::snprintf(ranks, sizeof ranks, "%.1f%% SLOW rank %d", pct, r.slowest_rank.value_or(0));
    }
    rows.push_back({r.label(), gb(r.gpu_peak_gb), gb(r.cpu_memory_gb), time, rate});
    if (spread) rows.back().push_back(ranks);
    rows.back().insert(rows.back().end(), {r.status, r.recommendation});
  }
  return text_table(rows);
}

}  // namespace zb
