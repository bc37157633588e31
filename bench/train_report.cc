#include "bench/train_report.h"

#include <algorithm>
#include <cstdio>

#include "core/strings.h"

namespace zb {

namespace {

std::string printf_string(const char* format, auto... values) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, format, values...);
  return buffer;
}

std::string rate_part(double tokens_per_second, const ThroughputModel& model) {
  const double tflops = tokens_per_second * model.flops_per_token / 1e12 / model.devices;
  std::string s = printf_string(" | %.4g TFLOP/s", tflops);
  if (model.devices > 1) s += " per " + model.device_kind;
  if (model.peak_tflops) s += printf_string(" | MFU %.1f%%", 100.0 * tflops / *model.peak_tflops);
  return s;
}

// The offload phases per step, each with its rate, and the slowest of them against the step: with the
// phases overlapped, the step approaches the slowest one.
std::string offload_part(const OffloadTimes& host, double count, double step_ms) {
  auto phase = [count](const char* name, double ms, double bytes) {
    std::string text = printf_string("%s %.1f ms", name, ms / count);
    if (bytes > 0 && ms > 0) text += printf_string(" (%.3f GB, %.1f GB/s)", bytes / count / 1e9, bytes / ms / 1e6);
    return text;
  };
  std::string out = "offload per step: " + phase("gradients to host", host.to_host_ms, host.to_host_bytes) + ", " +
                    phase("CPU optimizer", host.cpu_ms, 0) + ", " +
                    phase("weights to device", host.to_device_ms, host.to_device_bytes);
  std::pair<double, const char*> slowest{host.cpu_ms, "CPU optimizer"};
  for (const auto& candidate : {std::pair{host.to_host_ms, "gradients to host"},
                                std::pair{host.to_device_ms, "weights to device"},
                                std::pair{host.nvme_read_ms, "NVMe read"}, std::pair{host.nvme_write_ms, "NVMe write"}})
    if (candidate.first > slowest.first) slowest = candidate;
  if (host.nvme_read_bytes > 0) {
    out += ", " + phase("NVMe read", host.nvme_read_ms, host.nvme_read_bytes) + ", " +
           phase("NVMe write", host.nvme_write_ms, host.nvme_write_bytes) +
           printf_string(" (the optimizer waited %.1f ms for reads, %.1f ms for writes)", host.read_wait_ms / count,
                         host.write_wait_ms / count);
  }
  if (host.speculation_kept_ms + host.speculation_discarded_ms > 0) {
    out += printf_string(", speculative updates during backward: %.1f ms kept, %.1f ms redone after clipping",
                         host.speculation_kept_ms / count, host.speculation_discarded_ms / count);
  }
  out += printf_string("\noffload overlap: training waited %.1f ms per step for the host's updates; the step is "
                       "%.2fx its slowest offload phase (%s)\n",
                       host.update_wait_ms / count, step_ms / (slowest.first / count), slowest.second);
  return out;
}

}  // namespace

std::string format_step(const StepStats& s, int64_t num_steps, const ThroughputModel& model) {
  const double tokens_per_second = double(s.tokens) / s.seconds;
  // With loss scaling (fp16) the scale the step's gradients carried, and a skipped step says so.
  const std::string scaling = s.skipped             ? printf_string(" | overflow at loss scale %g: skipped", s.loss_scale)
                              : s.loss_scale != 1.0f ? printf_string(" | loss scale %g", s.loss_scale)
                                                    : std::string();
  return printf_string("step %lld/%lld | loss %.4f | norm %.4f | %.1f ms | %.0f tok/s", (long long)s.step,
                       (long long)num_steps, s.loss, s.grad_norm, s.seconds * 1e3, tokens_per_second) +
         rate_part(tokens_per_second, model) + scaling;
}

std::string format_summary(const std::vector<StepStats>& steps, int64_t warmup, const ThroughputModel& model,
                           const TrackingAllocator& allocator) {
  const size_t first = size_t(std::clamp<int64_t>(warmup, 0, int64_t(steps.size()) - 1));
  const double count = double(steps.size() - first);
  double seconds = 0, tokens = 0, forward = 0, backward = 0, optimizer = 0, aside = 0, exposed = 0, bytes = 0;
  OffloadTimes host;
  for (size_t i = first; i < steps.size(); ++i) {
    host += steps[i].offload;
    exposed += steps[i].comm.exposed_ms;
    bytes += steps[i].comm.total_bytes();
    seconds += steps[i].seconds;
    tokens += double(steps[i].tokens);
    forward += steps[i].forward_ms;
    backward += steps[i].backward_ms;
    optimizer += steps[i].optimizer_ms;
    aside += steps[i].update_aside_ms;
  }
  const double step_ms = seconds * 1e3 / count;
  auto share = [&](const char* name, double total_ms) {
    return printf_string("%s %.1f ms (%.0f%%)", name, total_ms / count, 100.0 * total_ms / count / step_ms);
  };
  std::string out = printf_string("summary over steps %zu-%zu: %.1f ms/step | %.0f tok/s", first + 1, steps.size(),
                                  step_ms, tokens / seconds) +
                    rate_part(tokens / seconds, model) + "\n";
  out += "time per step: " + share("forward", forward) + ", " + share("backward", backward) + ", " +
         share(aside > 0 ? "gradient norm" : "optimizer on the device (with the gradient norm)", optimizer) + ", " +
         share("other (host, copies, waits)", step_ms * count - forward - backward - optimizer) + "\n";
  if (aside > 0) {
    out += printf_string(
        "the optimizer's update ran beside the next forward (included in it): %.1f ms of device time\n", aside / count);
  }
  if (bytes > 0) {
    out += printf_string("communication per step and rank: %.3f GB of collectives; compute waited %.1f ms (%.0f%%) "
                         "for it (exposed)\n",
                         bytes / count / 1e9, exposed / count, 100.0 * exposed / count / step_ms);
  }
  if (host.cpu_ms > 0) out += offload_part(host, count, step_ms);
  out += "peak memory (GiB):";
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  for (MemoryPool pool : kAllMemoryPools)
    out += printf_string(" %s %.3f,", std::string(memory_pool_name(pool)).c_str(), allocator.usage(pool).peak / kGiB);
  out += printf_string(" total %.3f", allocator.total().peak / kGiB);
  return out;
}

}  // namespace zb
