// train: the plain trainer. Trains a model on synthetic tokens or token files and prints one line a step.
#include <cstdio>

#include "bench/cli.h"
#include "core/log.h"
#include "core/tracking_allocator.h"
#include "kernels/cpu/cpu_backend.h"

namespace {

int train(const zb::TrainingFlags& flags) {
  const zb::TrainingRun run = zb::validate_training_flags(flags);
  auto data = zb::make_token_source(run);  // opens and checks the token files before any training
  zb::CpuBackend backend;
  zb::TrackingAllocator allocator(std::make_unique<zb::HostMemory>());
  zb::Trainer trainer(run.options, backend, allocator, *data);

  const auto& o = run.options;
  std::printf("model %s\n", zb::describe(o.model).c_str());
  std::printf("device %s | batch %lld x seq %lld x grad-accum %lld | %s lr %g | data: %s\n",
              run.device.to_string().c_str(), (long long)o.batch, (long long)o.seq, (long long)o.grad_accum,
              std::string(zb::optimizer_kind_name(o.optimizer.kind)).c_str(), o.optimizer.lr,
              data->describe().c_str());
  std::fflush(stdout);
  double total_seconds = 0;
  int64_t total_tokens = 0;
  for (int64_t i = 0; i < run.num_steps; ++i) {
    const zb::StepStats s = trainer.step();
    total_seconds += s.seconds;
    total_tokens += s.tokens;
    std::printf("step %lld/%lld | loss %.4f | %.1f ms | %.0f tok/s\n", (long long)s.step, (long long)run.num_steps,
                s.loss, s.seconds * 1e3, s.tokens / s.seconds);
    std::fflush(stdout);
  }
  std::printf("done: %lld steps, %.1f ms/step, %.0f tok/s, peak memory %.3f GiB\n", (long long)run.num_steps,
              total_seconds / run.num_steps * 1e3, total_tokens / total_seconds,
              allocator.total().peak / (1024.0 * 1024.0 * 1024.0));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  zb::TrainingFlags flags;
  boost::program_options::options_description options("train options");
  zb::add_training_flags(options, flags);
  return zb::run_program(argc, argv, "usage: train [options]\nTrains a decoder-only transformer and prints one line a step.",
                         options, [&] { return train(flags); });
}
