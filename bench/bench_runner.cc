#include "bench/bench_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "comm/communicator_factory.h"
#include "core/cuda_devices.h"
#include "core/dtype.h"
#include "core/errors.h"
#include "core/strings.h"
#include "engine/parameter_store.h"
#include "kernels/backend_factory.h"
#include "models/activations.h"
#include "models/parameter_layout.h"
#include "models/transformer_config.h"
#include "offload/removal_on_termination.h"

namespace zb {

namespace {

constexpr double kGB = 1e9;

// Status codes as ranks agree on them: the larger the worse.
enum Status { kOk = 0, kInterrupted = 1, kOutOfMemory = 2, kError = 3 };

const char* status_name(int status) {
  switch (status) {
    case kOk: return "ok";
    case kInterrupted: return "interrupted";
    case kOutOfMemory: return "oom";
    default: return "error";
  }
}

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

// The timed steps of every repeat, summed per field for the means.
struct TimedSteps {
  std::vector<double> repeat_mean_ms;
  StepStats sum;  // of the fields added up below
  OffloadTimes offload;
  double comm_bytes = 0;
  int64_t count = 0;
  std::optional<double> loss_first, loss_last;
  RankSteps rank;  // every step's time, and this rank's busy time and tokens

  void add(const StepStats& s, int world) {
    rank.add(s, world);
    sum.forward_ms += s.forward_ms, sum.backward_ms += s.backward_ms, sum.optimizer_ms += s.optimizer_ms;
    sum.comm.exposed_ms += s.comm.exposed_ms;
    comm_bytes += s.comm.total_bytes();
    offload += s.offload;
    sum.tokens = s.tokens;
    ++count;
  }
};

// A rank that failed and waited in vain for the others to agree: they are stuck in a collective it will not
// join. Ending the job is the only way out that leaves no rank hanging.
[[noreturn]] void end_job_alone(int status, const std::string& message, int rank, double waited_s) {
  std::fprintf(stderr,
               "error on rank %d: %s (%s); the other ranks did not reach the agreement within %.0f s (they wait in "
               "a collective of the step this rank left), so the job ends here; the configurations that finished "
               "are in the results already\n",
               rank, message.c_str(), status_name(status), waited_s);
  std::fflush(stderr);
  remove_registered_files();  // this rank's NVMe files: their owners never get to remove them
  abort_job(1);
}

// The share of the optimizer's elements a configuration keeps on the host (see ParameterStore).
double offloaded_share(const TrainingOptions& options, int world) {
  return ParameterStore::host_optimizer_share(ParameterLayout(options.model), shard_geometry(options, 0, world));
}

}  // namespace

PredictedMemory predict_gpu_memory(const TrainingOptions& options, int64_t parameters, int world) {
  const double psi = double(parameters), n = double(world);
  const double weight_bytes = double(dtype_size(options.dtype));
  const double master = ParameterStore::has_separate_master(options.dtype) ? 4 : 0;
  const double moments = 4.0 * (options.optimizer.kind == OptimizerKind::sgd ? 1 : 2);
  const int stage = options.zero.stage;
  PredictedMemory p;
  p.parameters = weight_bytes * psi / (stage == 3 ? n : 1);
  p.gradients = weight_bytes * psi / (stage >= 2 ? n : 1);
  p.optimizer_state = (master + moments) * psi / (stage >= 1 ? n : 1);
  p.optimizer_state *= 1.0 - offloaded_share(options, world);          // on the host or in files
  if (options.offload == OffloadStrategy::cpu_full) p.parameters = 0;  // only the units in use come up
  return p;
}

BenchRunner::BenchRunner(MpiWorld& world, const BenchSettings& settings)
    : world_(world),
      settings_(settings),
      allocator_(make_device_memory(settings.device)),
      backend_(make_backend(settings.device, allocator_)),
      comm_(make_communicator(world, settings.device, backend_->native_stream())),
      telemetry_(settings.device.is_cuda() ? cuda_device_pci_bus_id(settings.device.index) : std::string()) {}

BenchRunner::~BenchRunner() = default;

BenchRecord BenchRunner::run(const TrainingOptions& options, RunProgress progress,
                             const std::function<bool()>& interrupted,
                             const std::function<void(const RunProgress&)>& on_step) {
  const int world = world_.size();
  BenchRecord r;
  r.stage = options.zero.stage;
  r.strategy = offload_spec_name(options.offload, options.offload_ratio);
  r.offload_ratio = options.offload_ratio;
  r.offloaded_share = offloaded_share(options, world);
  r.repeat = int(settings_.repeat);
  r.model = options.model.name;
  r.parameters = ParameterLayout(options.model).total_numel();
  r.world_size = world;
  r.batch_size = options.batch;
  r.seq_length = options.seq;
  r.grad_accum = options.grad_accum;
  r.dtype = std::string(dtype_name(options.dtype));

  TimedSteps timed;
  PoolUsage pools[kMemoryPoolCount];
  size_t total_peak = 0;
  double allocated_at_end = 0, host_pinned = 0, resident = 0;
  int status = kOk;
  std::string message;
  progress.steps = settings_.repeat * (settings_.warmup_steps + settings_.num_steps);
  progress.step = 0;
  telemetry_.clear();
  for (int64_t repeat = 0; repeat < settings_.repeat && status == kOk; ++repeat) {
    allocator_.reset_peaks();
    allocator_.set_limit(settings_.device_memory_limit);
    std::unique_ptr<TokenSource> data;
    std::unique_ptr<Trainer> trainer;
    auto attempt = [&](auto&& body) {
      try {
        body();
      } catch (const OutOfMemory& e) {
        status = kOutOfMemory, message = e.what();
      } catch (const std::exception& e) {
        status = kError, message = e.what();
      }
      const std::optional<RankAgreement::Outcome> agreed =
          agreement_.worst(status, message, settings_.agreement_timeout_s);
      if (!agreed) end_job_alone(status, message, world_.rank(), settings_.agreement_timeout_s);
      const RankAgreement::Outcome& outcome = *agreed;
      status = outcome.status;
      if (status != kOk) message = world > 1 ? cat("rank ", outcome.rank, ": ", outcome.message) : outcome.message;
    };
    attempt([&] {
      const BatchGeometry geometry{options.batch, options.seq, world_.rank(), world};
      data = settings_.data_glob.empty()
                 ? make_synthetic_tokens(geometry, options.model.vocab_size, options.seed)
                 : make_file_tokens(settings_.data_glob, settings_.data_format, geometry, options.model.vocab_size);
      trainer = std::make_unique<Trainer>(options, *backend_, allocator_, *data, comm_.get());
    });
    std::vector<double> repeat_ms;
    if (status == kOk)
      attempt([&] {
        for (int64_t step = 0; step < settings_.warmup_steps + settings_.num_steps; ++step) {
          if (agreement_.max(interrupted() ? 1 : 0) > 0) {
            status = kInterrupted, message = "interrupted";
            return;
          }
          const auto& inject = settings_.inject_failure;
          if (inject && inject->rank == world_.rank() && inject->configuration == progress.configuration &&
              inject->step == progress.step + 1) {
            throw Error(cat("a failure injected for tests on rank ", inject->rank, " at step ", inject->step));
          }
          if (step == settings_.warmup_steps) telemetry_.start();
          const StepStats stats = trainer->step();
          if (!timed.loss_first) timed.loss_first = stats.loss;
          timed.loss_last = stats.loss;
          if (step >= settings_.warmup_steps) {
            timed.add(stats, world);
            repeat_ms.push_back(stats.seconds * 1e3);
          }
          ++progress.step;
          on_step(progress);
        }
        telemetry_.stop();
        allocated_at_end = double(allocator_.total().current);
        host_pinned = double(trainer->host_allocator().total().peak);
        resident = resident_set_bytes();
      });
    telemetry_.stop();  // (where the steps ended early)
    if (!repeat_ms.empty()) timed.repeat_mean_ms.push_back(mean(repeat_ms));
    for (MemoryPool pool : kAllMemoryPools) {
      const PoolUsage usage = allocator_.usage(pool);
      PoolUsage& kept = pools[int(pool)];
      kept.peak = std::max(kept.peak, usage.peak);
    }
    total_peak = std::max(total_peak, allocator_.total().peak);
    // A step that failed may have left work queued on the device that still uses the trainer's buffers.
    try {
      backend_->synchronize();
    } catch (const std::exception&) {
      // (a device error: recorded above; the buffers are released all the same)
    }
    trainer.reset();  // everything the configuration allocated is released before the next one
  }
  allocator_.set_limit(std::nullopt);
  r.status = status_name(status);
  r.error = status == kOk ? "" : message;

  // Memory: the worst rank's, also for a failed run (how far it got).
  auto worst_gb = [&](double bytes) { return agreement_.max(bytes) / kGB; };
  r.gpu_peak_gb = worst_gb(double(total_peak));
  r.parameters_gb = worst_gb(double(pools[int(MemoryPool::parameters)].peak));
  r.gradients_gb = worst_gb(double(pools[int(MemoryPool::gradients)].peak));
  r.optimizer_state_gb = worst_gb(double(pools[int(MemoryPool::optimizer_state)].peak));
  r.activations_gb = worst_gb(double(pools[int(MemoryPool::activations)].peak));
  r.workspace_gb = worst_gb(double(pools[int(MemoryPool::workspace)].peak));
  const PredictedMemory predicted = predict_gpu_memory(options, r.parameters, world);
  r.predicted_parameters_gb = predicted.parameters / kGB;
  r.predicted_gradients_gb = predicted.gradients / kGB;
  r.predicted_optimizer_state_gb = predicted.optimizer_state / kGB;
  r.predicted_activations_gb =
      double(Activations::planned_bytes(options.model, options.dtype, options.batch, options.seq)) / kGB;
  if (status != kOk || timed.count == 0) return r;

  r.gpu_allocated_gb = worst_gb(allocated_at_end);
  r.cpu_memory_gb = worst_gb(resident);
  r.cpu_pinned_gb = worst_gb(host_pinned);
  const double n = double(timed.count);
  // This rank's own figures; the record's step statistics are this rank's (as the other ranks' are theirs).
  const RankResult mine = own_rank_result(world_.rank(), world_.host_name(), settings_.device, timed.rank,
                                          double(total_peak), resident, telemetry_);
  const std::vector<double>& step_ms = timed.rank.step_ms;
  r.avg_step_time_ms = mine.step_ms_mean;
  r.p50_step_ms = mine.step_ms_p50;
  r.p90_step_ms = mine.step_ms_p90;
  r.min_step_ms = *std::min_element(step_ms.begin(), step_ms.end());
  r.max_step_ms = *std::max_element(step_ms.begin(), step_ms.end());
  r.step_time_stddev_ms = stddev(step_ms);
  const double tokens_per_step = double(timed.sum.tokens);
  const double tokens_per_second = tokens_per_step / (*r.avg_step_time_ms / 1e3);
  if (settings_.repeat > 1) {
    std::vector<double> repeat_rates;
    for (double ms : timed.repeat_mean_ms) repeat_rates.push_back(tokens_per_step / (ms / 1e3));
    r.stddev_step_ms = stddev(timed.repeat_mean_ms);
    r.throughput_stddev = stddev(repeat_rates);
  }
  r.throughput_tokens_per_sec = tokens_per_second;
  r.throughput_tokens_per_sec_per_gpu = tokens_per_second / world;
  r.samples_per_sec = tokens_per_second / double(options.seq);
  r.tflops_per_gpu = tokens_per_second * training_flops_per_token(options.model, options.seq) / 1e12 / world;
  if (settings_.peak_tflops) r.mfu = *r.tflops_per_gpu / *settings_.peak_tflops;
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
  }
  r.loss_first = timed.loss_first;
  r.loss_last = timed.loss_last;
  if (settings_.gpu_hour_usd) {
    r.cost_per_1000_samples_usd = *settings_.gpu_hour_usd * world / 3600.0 * (1000.0 / *r.samples_per_sec);
  }
  if (*r.gpu_peak_gb > 0) r.efficiency = tokens_per_second / *r.gpu_peak_gb;

  r.per_rank = gather_rank_results(agreement_, mine);
  const RankSpread spread = rank_spread(r.per_rank);
  r.rank_step_spread_pct = spread.step_spread_pct;
  r.rank_busy_spread_pct = spread.busy_spread_pct;
  r.slowest_rank = spread.slowest_rank;
  r.rank_spread_note = spread.note;
  r.node_throughput = node_throughputs(r.per_rank);
  return r;
}

}  // namespace zb
