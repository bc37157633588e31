// train: the plain trainer. Trains a model on synthetic tokens or token files and prints one line a step,
// then a summary of the steady-state steps.
#include <cmath>
#include <cstdio>

#include "bench/cli.h"
#include "bench/gpu_peaks.h"
#include "bench/train_report.h"
#include "core/cuda_devices.h"
#include "core/errors.h"
#include "kernels/backend_factory.h"

namespace {

struct TrainOnlyFlags {
  double peak_tflops = 0;  // 0: from the GPU's name
  int64_t warmup_steps = 3;
};

int train(const zb::TrainingFlags& flags, const TrainOnlyFlags& extra) {
  const zb::TrainingRun run = zb::validate_training_flags(flags);
  if (!(extra.peak_tflops >= 0) || !std::isfinite(extra.peak_tflops)) {
    throw zb::UsageError(zb::cat("--peak-tflops: must be a positive number (0: look it up), got ", extra.peak_tflops));
  }
  if (extra.warmup_steps < 0) throw zb::UsageError("--warmup-steps: must not be negative");
  auto data = zb::make_token_source(run);  // opens and checks the token files before any training
  zb::TrackingAllocator allocator(zb::make_device_memory(run.device));
  auto backend = zb::make_backend(run.device, allocator);
  zb::Trainer trainer(run.options, *backend, allocator, *data);

  const auto& o = run.options;
  const std::string device_name = run.device.is_cuda() ? zb::cuda_device_name(run.device.index) : "CPU";
  zb::ThroughputModel throughput{zb::training_flops_per_token(o.model, o.seq), std::nullopt};
  // MFU against the bf16 tensor-core peak only when training in bf16 (or with an explicit peak).
  if (extra.peak_tflops > 0) throughput.peak_tflops = extra.peak_tflops;
  else if (run.device.is_cuda() && o.dtype == zb::DType::bf16) throughput.peak_tflops = zb::bf16_peak_tflops(device_name);

  std::printf("model %s\n", zb::describe(o.model).c_str());
  std::printf("device %s (%s) | %s | batch %lld x seq %lld x grad-accum %lld | %s lr %g | data: %s\n",
              run.device.to_string().c_str(), device_name.c_str(), std::string(zb::dtype_name(o.dtype)).c_str(),
              (long long)o.batch, (long long)o.seq, (long long)o.grad_accum,
              std::string(zb::optimizer_kind_name(o.optimizer.kind)).c_str(), o.optimizer.lr, data->describe().c_str());
  std::fflush(stdout);
  std::vector<zb::StepStats> steps;
  for (int64_t i = 0; i < run.num_steps; ++i) {
    steps.push_back(trainer.step());
    std::printf("%s\n", zb::format_step(steps.back(), run.num_steps, throughput).c_str());
    std::fflush(stdout);
  }
  std::printf("%s\n", zb::format_summary(steps, extra.warmup_steps, throughput, allocator).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  zb::TrainingFlags flags;
  TrainOnlyFlags extra;
  namespace po = boost::program_options;
  po::options_description options("train options");
  zb::add_training_flags(options, flags);
  options.add_options()
      ("peak-tflops", po::value(&extra.peak_tflops)->default_value(0.0, "from the GPU's name"),
       "the GPU's dense bf16 peak in TFLOP/s, for MFU")
      ("warmup-steps", po::value(&extra.warmup_steps)->default_value(extra.warmup_steps),
       "first steps left out of the summary");
  return zb::run_program(argc, argv, "usage: train [options]\nTrains a decoder-only transformer and prints one line a step.",
                         options, [&] { return train(flags, extra); });
}
