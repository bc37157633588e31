#include "bench/bench_measurements.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/dtype.h"
#include "engine/memory_plan.h"
#include "engine/parameter_store.h"
#include "models/parameter_layout.h"
#include "models/transformer_config.h"

namespace zb {

namespace {

constexpr double kGB = 1e9;

double mean(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
}

double stddev(const std::vector<double>& values) {  // sample standard deviation
  if (values.size() < 2) return 0;
  const double m = mean(values);
  double squares = 0;
  for (double v : values) squares += (v - m) * (v - m);
  return std::sqrt(squares / double(values.size() - 1));
}

// The share of the optimizer's elements a configuration keeps on the host (see ParameterStore).
double offloaded_share(const TrainingOptions& options, int world) {
  return ParameterStore::host_optimizer_share(ParameterLayout(options.model), shard_geometry(options, 0, world));
}

}  // namespace

void TimedSteps::add(const StepStats& s, int world) {
  rank.add(s, world);
  sum.forward_ms += s.forward_ms, sum.backward_ms += s.backward_ms, sum.optimizer_ms += s.optimizer_ms;
  sum.comm.exposed_ms += s.comm.exposed_ms;
  comm_bytes += s.comm.total_bytes();
  offload += s.offload;
  sum.tokens = s.tokens;
  ++count;
}

void TimedSteps::end_repeat() {
  const std::vector<double>& ms = rank.step_ms;
  if (ms.size() > repeat_begin_) {
    repeat_mean_ms.push_back(std::accumulate(ms.begin() + std::ptrdiff_t(repeat_begin_), ms.end(), 0.0) /
                             double(ms.size() - repeat_begin_));
  }
  repeat_begin_ = ms.size();
}

void MeasuredMemory::note_end_of_steps(const TrackingAllocator& device_allocator,
                                       const TrackingAllocator& host_allocator) {
  allocated_at_end = double(device_allocator.total().current);
  host_pinned = double(host_allocator.total().peak);
  resident = resident_set_bytes();
}

void MeasuredMemory::add_peaks(const TrackingAllocator& device_allocator, const Backend& backend) {
  backend_workspace = std::max(backend_workspace, backend.workspace_bytes());
  if (backend.device().is_cuda()) outside_engine = std::max(outside_engine.value_or(0), device_allocator.held_outside());
  for (MemoryPool pool : kAllMemoryPools) {
    PoolUsage& kept = pools[int(pool)];
    kept.peak = std::max(kept.peak, device_allocator.usage(pool).peak);
  }
  total_peak = std::max(total_peak, device_allocator.total().peak);
}

BenchRecord configuration_record(const TrainingOptions& options, int world, int64_t repeat) {
  BenchRecord r;
  r.stage = options.zero.stage;
  r.strategy = offload_spec_name(options.offload, options.offload_ratio);
  r.offload_ratio = options.offload_ratio;
  r.offloaded_share = offloaded_share(options, world);
  r.repeat = int(repeat);
  r.model = options.model.name;
  const ParameterLayout layout(options.model);
  r.parameters = layout.total_numel();
  r.trainable_parameters = layout.trainable_numel();
  r.frozen_parameters = r.parameters - r.trainable_parameters;
  r.world_size = world;
  r.batch_size = options.batch;
  r.seq_length = options.seq;
  r.grad_accum = options.grad_accum;
  r.dtype = std::string(dtype_name(options.dtype));
  r.activation_checkpointing = std::string(activation_checkpointing_name(options.activation_checkpointing));
  r.optimizer = optimizer_name(options.optimizer);
  r.lora = lora_description(options.model.lora);
  r.lora_rank = options.model.lora.enabled() ? options.model.lora.rank : 0;
  return r;
}

void fill_memory(BenchRecord& r, const TrainingOptions& options, const MeasuredMemory& memory,
                 const RankAgreement& agreement) {
  auto worst_gb = [&](double bytes) { return agreement.max(bytes) / kGB; };
  r.gpu_peak_gb = worst_gb(double(memory.total_peak));
  r.parameters_gb = worst_gb(double(memory.pools[int(MemoryPool::parameters)].peak));
  r.gradients_gb = worst_gb(double(memory.pools[int(MemoryPool::gradients)].peak));
  r.optimizer_state_gb = worst_gb(double(memory.pools[int(MemoryPool::optimizer_state)].peak));
  r.activations_gb = worst_gb(double(memory.pools[int(MemoryPool::activations)].peak));
  r.workspace_gb = worst_gb(double(memory.pools[int(MemoryPool::workspace)].peak));
  r.backend_workspace_gb = worst_gb(double(memory.backend_workspace));
  if (memory.outside_engine) r.gpu_outside_engine_gb = worst_gb(double(*memory.outside_engine));
  // (Every rank plans, so every rank takes part in the agreements below, planned or not; a plan the options refuse
  // leaves the predictions empty rather than costing the record.)
  MemoryPlan plan;
  bool planned = true;
  try {
    plan = plan_memory(options, agreement.rank(), r.world_size, memory.backend_workspace);
  } catch (const std::exception& e) {
    planned = false;
    std::fprintf(stderr, "warning: rank %d: no memory plan of this configuration: %s\n", agreement.rank(), e.what());
  }
  if (agreement.max(planned ? 0.0 : 1.0) > 0) return;  // (any rank without a plan: none recorded)
  r.predicted_parameters_gb = worst_gb(double(plan.pool(MemoryPool::parameters)));
  r.predicted_gradients_gb = worst_gb(double(plan.pool(MemoryPool::gradients)));
  r.predicted_optimizer_state_gb = worst_gb(double(plan.pool(MemoryPool::optimizer_state)));
  r.predicted_activations_gb = worst_gb(double(plan.pool(MemoryPool::activations)));
  r.predicted_workspace_gb = worst_gb(double(plan.pool(MemoryPool::workspace)));
  r.predicted_gpu_peak_gb = worst_gb(double(plan.peak));
}

void fill_measurements(BenchRecord& r, const TrainingOptions& options, const TimedSteps& timed,
                       const MeasuredMemory& memory, const RankResult& mine, const RecordSettings& settings,
                       const RankAgreement& agreement) {
  const int world = r.world_size;
  auto worst_gb = [&](double bytes) { return agreement.max(bytes) / kGB; };
  r.gpu_allocated_gb = worst_gb(memory.allocated_at_end);
  r.cpu_memory_gb = worst_gb(memory.resident);
  r.cpu_pinned_gb = worst_gb(memory.host_pinned);
  const double n = double(timed.count);
  // The record's step statistics are this rank's (as the other ranks' are theirs).
  const std::vector<double>& step_ms = timed.rank.step_ms;
  r.avg_step_time_ms = mine.step_ms_mean;
  r.p50_step_ms = mine.step_ms_p50;
  r.p90_step_ms = mine.step_ms_p90;
  r.min_step_ms = *std::min_element(step_ms.begin(), step_ms.end());
  r.max_step_ms = *std::max_element(step_ms.begin(), step_ms.end());
  r.step_time_stddev_ms = stddev(step_ms);
  const double tokens_per_step = double(timed.sum.tokens);
  const double tokens_per_second = tokens_per_step / (*r.avg_step_time_ms / 1e3);
  if (settings.repeat > 1) {
    std::vector<double> repeat_rates;
    for (double ms : timed.repeat_mean_ms) repeat_rates.push_back(tokens_per_step / (ms / 1e3));
    r.stddev_step_ms = stddev(timed.repeat_mean_ms);
    r.throughput_stddev = stddev(repeat_rates);
  }
  r.throughput_tokens_per_sec = tokens_per_second;
  r.throughput_tokens_per_sec_per_gpu = tokens_per_second / world;
  r.samples_per_sec = tokens_per_second / double(options.seq);
  r.tflops_per_gpu = tokens_per_second * training_flops_per_token(options.model, options.seq) / 1e12 / world;
  if (settings.peak_tflops) r.mfu = *r.tflops_per_gpu / *settings.peak_tflops;
  const OffloadTimes& o = timed.offload;
  if (o.nvme_read_bytes + o.nvme_write_bytes > 0) {
    r.nvme_read_gb = o.nvme_read_bytes / n / kGB;
    r.nvme_write_gb = o.nvme_write_bytes / n / kGB;
    if (o.nvme_read_ms > 0) r.nvme_read_gbps = o.nvme_read_bytes / (o.nvme_read_ms / 1e3) / kGB;
    if (o.nvme_write_ms > 0) r.nvme_write_gbps = o.nvme_write_bytes / (o.nvme_write_ms / 1e3) / kGB;
    r.nvme_read_ms = o.nvme_read_ms / n;
    r.nvme_write_ms = o.nvme_write_ms / n;
  }
  r.comm_bytes_per_step = timed.comm_bytes / n;
  r.forward_ms = timed.sum.forward_ms / n;
  r.backward_ms = timed.sum.backward_ms / n;
  r.optimizer_ms = timed.sum.optimizer_ms / n;
  r.exposed_comm_ms = timed.sum.comm.exposed_ms / n;
  if (options.offload != OffloadStrategy::none) {
    r.offload_to_host_ms = o.to_host_ms / n;
    r.offload_cpu_optimizer_ms = o.cpu_ms / n;
    r.offload_to_device_ms = o.to_device_ms / n;
    r.offload_wait_ms = o.update_wait_ms / n;
    r.offload_speculation_kept_ms = o.speculation_kept_ms / n;
    r.offload_speculation_discarded_ms = o.speculation_discarded_ms / n;
  }
  r.loss_first = timed.loss_first;
  r.loss_last = timed.loss_last;
  if (options.loss_scaling.enabled) {
    r.loss_scale = timed.loss_scale;
    r.skipped_steps = timed.skipped_steps;
  }
  if (settings.gpu_hour_usd) {
    r.cost_per_1000_samples_usd = cost_per_1000_samples_usd(*settings.gpu_hour_usd, world, *r.samples_per_sec);
  }
  if (*r.gpu_peak_gb > 0) r.efficiency = tokens_per_second / *r.gpu_peak_gb;

  r.per_rank = gather_rank_results(agreement, mine);
  const RankSpread spread = rank_spread(r.per_rank);
  r.rank_step_spread_pct = spread.step_spread_pct;
  r.rank_busy_spread_pct = spread.busy_spread_pct;
  r.slowest_rank = spread.slowest_rank;
  r.rank_spread_note = spread.note;
  r.node_throughput = node_throughputs(r.per_rank);
}

}  // namespace zb
