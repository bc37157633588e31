#include "bench/peak_rates.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "bench/device_ceilings.h"
#include "bench/profile_summary.h"
#include "core/cuda_memory.h"
#include "core/strings.h"
#include "offload/aio_file.h"
#include "offload/cpu_optimizer.h"

namespace zb {

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

// Repeats of the measurements timed here (the GEMM's and the device copy's are measure_device_ceilings'). Fixed
// counts, the same on every rank, since each repeat starts with a barrier.
constexpr int kLinkWarmups = 1, kLinkRepeats = 5;
constexpr int kAllReduceWarmups = 2, kAllReduceRepeats = 5;  // the first collectives set up NCCL's connections
constexpr int kNvmeWarmups = 1, kNvmeRepeats = 3;
constexpr int kOptimizerWarmups = 1, kOptimizerRepeats = 3;

// What this rank learned of one rate: its value (in the PeakRates field's unit), or why it has none. Which rates
// are attempted depends only on what the ranks share (the backend's kind, the world's size, the folder), so every
// rank attempts the same ones and agrees on the same list.
struct Reading {
  explicit Reading(std::string label) : name(std::move(label)) {}
  std::string name;
  std::optional<double> value;
  std::string why;       // this rank's own failure; empty where it measured or only went without because of another
  int failed_ranks = 0;  // after agreement: the ranks that failed to measure it
};

// One line, whatever the exception said.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

// Keeps a rate only where it is one: positive and finite.
void set_rate(Reading& r, double rate) {
  if (std::isfinite(rate) && rate > 0) r.value = rate;
  else r.why = cat("not a rate (", rate, ")");
}

// Waits for the device before the buffers declared ahead of it are released: a copy still queued when an
// exception leaves the scope must not outlive its memory.
class IdleBeforeRelease {
 public:
  explicit IdleBeforeRelease(Backend& backend) : backend_(backend) {}
  ~IdleBeforeRelease() {
    try {
      backend_.synchronize();
    } catch (const std::exception&) {
      // The failure that brought us here is the one reported.
    }
  }
  IdleBeforeRelease(const IdleBeforeRelease&) = delete;
  IdleBeforeRelease& operator=(const IdleBeforeRelease&) = delete;

 private:
  Backend& backend_;
};

// The seconds `work` takes on the device's own clock (its events).
double device_seconds(Backend& backend, const std::function<void()>& work) {
  const auto start = backend.record_event();
  work();
  const auto end = backend.record_event();
  return backend.elapsed_ms(*start, *end) / 1e3;
}

// The seconds `work` takes on the host's clock (it blocks until done).
double host_seconds(const std::function<void()>& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The fastest of `repeats` runs of `once` (which returns its seconds) after `warmups` untimed ones, each run
// after a barrier so that every rank's runs overlap, as the ranks' transfers do in a run. The barriers are
// called on every rank the same number of times whatever fails here: nullopt, with `why` set, where `ready` is
// false (why already says why) or `once` threw.
std::optional<double> best_seconds(Communicator& comm, int warmups, int repeats, bool ready, std::string& why,
                                   const std::function<double()>& once) {
  bool ok = ready;
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < warmups + repeats; ++i) {
    comm.barrier();
    if (!ok) continue;
    try {
      const double seconds = once();
      if (i >= warmups) best = std::min(best, seconds);
    } catch (const std::exception& e) {
      ok = false;
      why = one_line(e.what());
    }
  }
  if (!ok) return std::nullopt;
  return best;
}

// The GEMM and the device copy, through measure_device_ceilings.
std::string measure_ceilings(Backend& backend, TrackingAllocator& allocator, DType dtype, Reading& gemm,
                             Reading& memory) {
  try {
    const DeviceCeilings c = measure_device_ceilings(backend, allocator, dtype);
    set_rate(gemm, c.flops_per_second / 1e12);
    set_rate(memory, c.bytes_per_second / 1e9);
    return cat(c.how, " (measure_device_ceilings: best of 10 after 0.3 s of warm-up, device events)");
  } catch (const std::exception& e) {
    gemm.why = memory.why = one_line(e.what());
    return "GEMM and device copy (measure_device_ceilings)";
  }
}

// Pinned host memory to the device and back, queued copies timed with the device's events.
void measure_host_link(Backend& backend, TrackingAllocator& device_allocator, Communicator& comm, int64_t bytes,
                       Reading& to_device, Reading& to_host) {
  bool ready = false;
  std::string why;
  TrackingAllocator pinned_allocator(std::make_unique<PinnedHostMemory>());
  Buffer host, device;
  IdleBeforeRelease idle(backend);
  Tensor on_host, on_device;
  try {
    host = pinned_allocator.allocate(size_t(bytes), MemoryPool::workspace);
    device = device_allocator.allocate(size_t(bytes), MemoryPool::workspace);
    std::memset(host.data(), 0x5a, host.bytes());  // its pages touched before any copy is timed
    on_host = host.view({bytes / 4}, DType::f32);
    on_device = device.view({bytes / 4}, DType::f32);
    backend.synchronize();
    ready = true;
  } catch (const std::exception& e) {
    why = one_line(e.what());
  }
  to_device.why = to_host.why = why;
  const auto down = best_seconds(comm, kLinkWarmups, kLinkRepeats, ready, to_device.why, [&] {
    return device_seconds(backend, [&] { backend.copy_queued(on_host, on_device); });
  });
  if (down) set_rate(to_device, double(bytes) / *down / 1e9);
  const auto up = best_seconds(comm, kLinkWarmups, kLinkRepeats, ready, to_host.why, [&] {
    return device_seconds(backend, [&] { backend.copy_queued(on_device, on_host); });
  });
  if (up) set_rate(to_host, double(bytes) / *up / 1e9);
}

// An all-reduce of `bytes` over every rank: device events around the collective and the compute stream's wait
// for it on a GPU, the host's clock around the (synchronous) MPI one. Its bus bandwidth is NCCL's.
// A collective that throws on one rank while the others complete it cannot be recovered here (they go on to the
// next); a communicator failing so is broken for the run anyway.
void measure_all_reduce(Backend& backend, TrackingAllocator& device_allocator, Communicator& comm, DType dtype,
                        int64_t bytes, Reading& bus) {
  bool ready = false;
  Buffer buffer;
  IdleBeforeRelease idle(backend);
  Tensor data;
  try {
    buffer = device_allocator.allocate(size_t(bytes), MemoryPool::workspace);
    data = buffer.view({bytes / int64_t(dtype_size(dtype))}, dtype);
    backend.fill_zero(data);  // sums of zeros: no overflow, whatever the dtype
    backend.synchronize();
    ready = true;
  } catch (const std::exception& e) {
    bus.why = one_line(e.what());
  }
  // The collective needs every rank: it runs only where all have their buffer.
  const bool everyone = comm.all_ok(ready);
  const bool on_device = backend.device().is_cuda();
  const auto seconds = best_seconds(comm, kAllReduceWarmups, kAllReduceRepeats, everyone, bus.why, [&] {
    if (on_device) return device_seconds(backend, [&] { comm.wait(comm.all_reduce_sum(data)); });
    return host_seconds([&] { comm.host_wait(comm.all_reduce_sum(data)); });
  });
  if (seconds) set_rate(bus, double(bytes) / *seconds * bus_bandwidth_factor("all_reduce", comm.size()) / 1e9);
}

// A file of this rank's in `folder`, written and read whole through AioFile with the offload's default settings,
// timed on the host's clock; removed when done. Returns whether the file system took O_DIRECT (nullopt where no
// file was made).
std::optional<bool> measure_nvme(Communicator& comm, const std::string& folder, int64_t bytes, Reading& write,
                                 Reading& read) {
  bool ready = false;
  std::optional<bool> direct;
  std::string why;
  TrackingAllocator host_allocator(std::make_unique<HostMemory>(AioFile::kAlignment));
  Buffer buffer;
  std::unique_ptr<AioFile> file;
  try {
    const std::filesystem::path path =
        std::filesystem::path(folder) / cat("zb_peak_rates_", ::getpid(), "_rank", comm.rank(), ".bin");
    file = std::make_unique<AioFile>(path.string(), AioConfig{});
    direct = file->direct();
    buffer = host_allocator.allocate(size_t(bytes), MemoryPool::workspace);
    std::memset(buffer.data(), 0x5a, buffer.bytes());
    ready = true;
  } catch (const std::exception& e) {
    why = one_line(e.what());
  }
  write.why = why;
  // The warm-up write also gives the reads their data.
  const auto written = best_seconds(comm, kNvmeWarmups, kNvmeRepeats, ready, write.why, [&] {
    return host_seconds([&] { file->write(buffer.data(), size_t(bytes), 0); });
  });
  if (written) set_rate(write, double(bytes) / *written / 1e9);
  read.why = write.why;
  const auto was_read = best_seconds(comm, kNvmeWarmups, kNvmeRepeats, ready && written, read.why, [&] {
    return host_seconds([&] { file->read(buffer.data(), size_t(bytes), 0); });
  });
  if (was_read) set_rate(read, double(bytes) / *was_read / 1e9);
  return direct;
}

// One thread that runs the timed updates, as the offload's own worker thread runs training's: the OpenMP team
// it starts on the first update serves the next ones. (A new thread for each update would start a new team of
// `threads`, whose start-up a short update would pay: with one rank of many threads, half its time.)
class UpdateThread {
 public:
  UpdateThread() : worker_([this] { serve(); }) {}
  ~UpdateThread() {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    changed_.notify_all();
    worker_.join();
  }
  UpdateThread(const UpdateThread&) = delete;
  UpdateThread& operator=(const UpdateThread&) = delete;

  // Runs `job` there and returns when it is done, with its exception if it threw.
  void run(std::function<void()> job) {
    std::unique_lock lock(mutex_);
    job_ = std::move(job);
    error_ = nullptr;
    changed_.notify_all();
    changed_.wait(lock, [&] { return !job_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void serve() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return quit_ || bool(job_); });
      if (quit_) return;
      lock.unlock();
      try {
        job_();
      } catch (...) {
        error_ = std::current_exception();
      }
      lock.lock();
      job_ = nullptr;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> job_;  // (read by the worker unlocked while run() waits for it)
  std::exception_ptr error_;
  bool quit_ = false;
  std::thread worker_;  // last: started once the rest is
};

// The CPU optimizer's update of `elements` parameters on this rank's own arrays with `threads` threads, in place as
// the offload updates (the weights written over the gradients), in the host memory the offload keeps its state in
// (`state_memory`: page-locked beside a GPU), timed on the host's clock.
void measure_host_optimizer(Communicator& comm, std::unique_ptr<RawMemory> state_memory, int64_t elements,
                            int threads, Reading& rate) {
  bool ready = false;
  TrackingAllocator host_allocator(std::move(state_memory));
  Buffer master, m, v, grad;
  std::optional<UpdateThread> updates;  // (joined before the buffers are freed)
  try {
    master = host_allocator.allocate(Shape{elements}, DType::f32, MemoryPool::workspace);
    m = host_allocator.allocate(Shape{elements}, DType::f32, MemoryPool::workspace);
    v = host_allocator.allocate(Shape{elements}, DType::f32, MemoryPool::workspace);
    grad = host_allocator.allocate(Shape{elements}, DType::bf16, MemoryPool::workspace);
    // Every page touched before timing; moments of zero, weights of 0.02 and gradients of 1e-3 (bf16 bits).
    std::memset(m.data(), 0, m.bytes());
    std::memset(v.data(), 0, v.bytes());
    std::fill_n(static_cast<float*>(master.data()), elements, 0.02f);
    std::fill_n(static_cast<uint16_t*>(grad.data()), elements, uint16_t(0x3a83));
    updates.emplace();
    updates->run([&] { use_optimizer_threads(threads); });
    ready = true;
  } catch (const std::exception& e) {
    rate.why = one_line(e.what());
  }
  const CpuOptimizerShard shard{static_cast<float*>(master.data()), grad.data(), static_cast<float*>(m.data()),
                                static_cast<float*>(v.data()), grad.data(), elements, DType::bf16};
  OptimizerParams params;
  const auto seconds = best_seconds(comm, kOptimizerWarmups, kOptimizerRepeats, ready, rate.why, [&] {
    ++params.step;
    return host_seconds([&] { updates->run([&] { cpu_optimizer_step(shard, params); }); });
  });
  if (seconds) set_rate(rate, double(elements) / *seconds / 1e9);
}

// Every reading made the slowest rank's, the same bits on every rank. Rank k's value alone is non-zero in slot k
// of a host sum (adding zeros keeps its bits); a rank without one puts -1 there where it failed itself and 0
// where it only went without because another rank failed. A rate any rank lacks is absent everywhere. One host
// sum per rank and rate: microseconds each, nothing beside the measurements.
void agree(Communicator& comm, const std::vector<Reading*>& readings) {
  for (Reading* r : readings) {
    const double mine = r->value ? *r->value : (r->why.empty() ? 0.0 : -1.0);
    std::optional<double> slowest = std::numeric_limits<double>::infinity();
    int failed = 0;
    for (int k = 0; k < comm.size(); ++k) {
      const double v = comm.sum_over_ranks(k == comm.rank() ? mine : 0.0);
      if (v < 0) ++failed;
      if (!(v > 0)) slowest.reset();
      else if (slowest) slowest = std::min(*slowest, v);
    }
    r->value = slowest;
    r->failed_ranks = failed;
  }
}

// "not measured" notes for `how`, one for each run of readings that failed alike (the two directions of a link
// usually do), with this rank's reason where it failed.
std::vector<std::string> failure_notes(const std::vector<Reading*>& readings, int rank, int world) {
  std::vector<std::string> notes;
  for (size_t i = 0; i < readings.size();) {
    const Reading& first = *readings[i];
    if (first.value) {
      ++i;
      continue;
    }
    std::vector<std::string> names{first.name};
    size_t j = i + 1;
    for (; j < readings.size() && !readings[j]->value && readings[j]->why == first.why &&
           readings[j]->failed_ranks == first.failed_ranks;
         ++j)
      names.push_back(readings[j]->name);
    std::string note = cat(join(names, ", "), " not measured");
    if (world > 1) note += cat(" (failed on ", first.failed_ranks, " of ", world, " ranks)");
    if (!first.why.empty()) note += cat(": ", world > 1 ? cat("rank ", rank, ": ") : std::string(), first.why);
    notes.push_back(note);
    i = j;
  }
  return notes;
}

}  // namespace

PeakRates measure_peak_rates(Backend& backend, TrackingAllocator& device_allocator, Communicator& comm, DType dtype,
                             const std::string& nvme_folder, int ranks_per_host) {
  PeakRates rates;
  rates.world_size = comm.size();
  rates.ranks_per_host = ranks_per_host;
  const bool gpu = backend.device().is_cuda();
  // Large enough on a GPU machine that fixed costs vanish; small on the CPU backend, which tests run.
  const int64_t link_bytes = 256 * kMiB;
  const int64_t all_reduce_bytes = (gpu ? 256 : 16) * kMiB;
  const int64_t nvme_bytes = (gpu ? 1024 : 64) * kMiB;
  // (The update's rate with every rank at once sets the offload's host time: on a GPU machine, a few hundred
  // milliseconds of it, as in training.)
  const int64_t optimizer_elements = (gpu ? 256 : 4) * kMiB;
  // The run's dtype where the communicator carries it.
  const DType reduced = dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f64 ? dtype : DType::f32;

  Reading gemm{"GEMM"}, memory{"device copy"}, to_device{"host-to-device copy"}, to_host{"device-to-host copy"},
      bus{"all-reduce"}, nvme_write{"NVMe write"}, nvme_read{"NVMe read"}, host_optimizer{"CPU optimizer"};
  std::vector<Reading*> attempted;
  std::vector<std::string> how;
  // Every rank takes the same branches (see Reading), so the collectives inside line up.
  if (gpu) {
    how.push_back(measure_ceilings(backend, device_allocator, dtype, gemm, memory));
    measure_host_link(backend, device_allocator, comm, link_bytes, to_device, to_host);
    how.push_back(cat("host<->device ", link_bytes / kMiB, " MiB pinned, each way: best of ", kLinkRepeats,
                      " after ", kLinkWarmups, ", device events"));
    attempted.insert(attempted.end(), {&gemm, &memory, &to_device, &to_host});
  } else {
    how.push_back("GEMM, device copy, host link: none on the CPU backend");
  }
  if (comm.size() > 1) {
    measure_all_reduce(backend, device_allocator, comm, reduced, all_reduce_bytes, bus);
    how.push_back(cat("all-reduce ", all_reduce_bytes / kMiB, " MiB ", dtype_name(reduced), " over ", comm.size(),
                      " ranks: best of ", kAllReduceRepeats, " after ", kAllReduceWarmups, ", ",
                      gpu ? "device events" : "steady_clock", ", bus bandwidth bytes/time * 2(n-1)/n"));
    attempted.push_back(&bus);
  } else {
    how.push_back("all-reduce: none with one rank");
  }
  const int threads = optimizer_threads_beside_training(ranks_per_host);
  measure_host_optimizer(comm, gpu ? std::unique_ptr<RawMemory>(std::make_unique<PinnedHostMemory>())
                                   : std::make_unique<HostMemory>(),
                         optimizer_elements, threads, host_optimizer);
  how.push_back(cat("CPU optimizer: AdamW over ", optimizer_elements / kMiB, "Mi parameters a rank (fp32 state, bf16 "
                    "gradients and weights, ", gpu ? "pinned" : "pageable", " memory), ", threads,
                    " thread(s) a rank on one worker thread, every rank at once: best of ",
                    kOptimizerRepeats, " after ", kOptimizerWarmups, ", steady_clock"));
  attempted.push_back(&host_optimizer);
  if (!nvme_folder.empty()) {
    const std::optional<bool> direct = measure_nvme(comm, nvme_folder, nvme_bytes, nvme_write, nvme_read);
    const AioConfig aio;
    how.push_back(cat("NVMe ", nvme_bytes / kMiB, " MiB a rank in ", nvme_folder, " through AioFile (",
                      !direct ? "" : *direct ? "O_DIRECT, " : "buffered: the file system refuses O_DIRECT, ",
                      aio.block_size / kMiB, " MiB blocks, queue depth ", aio.queue_depth,
                      "), every rank at once: best of ", kNvmeRepeats, " after ", kNvmeWarmups,
                      " each way, steady_clock"));
    attempted.insert(attempted.end(), {&nvme_write, &nvme_read});
  } else {
    how.push_back("NVMe: no folder");
  }

  // This rank's own failures, one warning for each run of rates that failed alike.
  for (size_t i = 0; i < attempted.size();) {
    std::vector<std::string> names{attempted[i]->name};
    size_t j = i + 1;
    for (; j < attempted.size() && attempted[j]->why == attempted[i]->why; ++j) names.push_back(attempted[j]->name);
    if (!attempted[i]->why.empty())
      std::fprintf(stderr, "warning: peak rates, rank %d: %s not measured (%s); the profile has none\n", comm.rank(),
                   join(names, ", ").c_str(), attempted[i]->why.c_str());
    i = j;
  }
  agree(comm, attempted);
  if (comm.size() > 1) how.push_back("each rate the slowest rank's");
  for (const std::string& note : failure_notes(attempted, comm.rank(), comm.size())) how.push_back(note);

  rates.gemm_tflops = gemm.value;
  rates.memory_gbps = memory.value;
  rates.host_to_device_gbps = to_device.value;
  rates.device_to_host_gbps = to_host.value;
  rates.collective_bus_gbps = bus.value;
  rates.nvme_write_gbps = nvme_write.value;
  rates.nvme_read_gbps = nvme_read.value;
  rates.host_optimizer_gparams_per_s = host_optimizer.value;
  rates.how = join(how, "; ");
  device_allocator.reset_peaks();  // the programs' peaks are their training's
  return rates;
}

nlohmann::ordered_json to_json(const PeakRates& rates) {
  const auto rate = [](const std::optional<double>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json j;
  j["gemm_tflops"] = rate(rates.gemm_tflops);
  j["memory_gbps"] = rate(rates.memory_gbps);
  j["host_to_device_gbps"] = rate(rates.host_to_device_gbps);
  j["device_to_host_gbps"] = rate(rates.device_to_host_gbps);
  j["collective_bus_gbps"] = rate(rates.collective_bus_gbps);
  j["world_size"] = rates.world_size;
  j["nvme_read_gbps"] = rate(rates.nvme_read_gbps);
  j["nvme_write_gbps"] = rate(rates.nvme_write_gbps);
  j["host_optimizer_gparams_per_s"] = rate(rates.host_optimizer_gparams_per_s);
  j["ranks_per_host"] = rates.ranks_per_host;
  j["how"] = rates.how;
  return j;
}

}  // namespace zb
