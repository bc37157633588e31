#include "engine/host_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "core/trace.h"
#include "offload/cpu_optimizer.h"

namespace zb {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Bytes rounded up to the file's alignment (O_DIRECT transfers).
int64_t file_aligned(size_t bytes) {
  const int64_t a = int64_t(AioFile::kAlignment);
  return (int64_t(bytes) + a - 1) / a * a;
}

// Waits for a transfer started on another thread, adding the wait to wait_ms and the transfer's own
// duration (what the future returns) to busy_ms; rethrows its IoError.
void finish_transfer(std::future<double>& pending, double& wait_ms, double& busy_ms) {
  if (!pending.valid()) return;
  const auto start = Clock::now();
  busy_ms += pending.get();
  wait_ms += ms_since(start);
}

}  // namespace

int64_t HostOptimizer::moments_offset(const Unit& unit) const {
  return file_aligned(size_t(unit.n) * sizeof(float));
}

size_t HostOptimizer::state_bytes(const Unit& unit) const {
  return size_t(moments_offset(unit) + file_aligned(format_.moment_bytes(unit.n)));
}

size_t HostOptimizer::host_bytes(const ParameterLayout& layout, DType dtype, const ShardGeometry& geometry,
                                 const OptimizerStateFormat& format, bool nvme) {
  size_t state = 0, buffers = 0, weights = 0, largest = 0;
  const std::vector<bool> on_host = ParameterStore::host_optimizer_units(layout, geometry);
  for (size_t u = 0; u < on_host.size(); ++u) {
    const size_t range = size_t(ParameterStore::optimizer_numel(
        ParameterStore::padded_numel(layout.unit(u).numel, geometry), geometry));
    // The store keeps the range's weights on the host, of every unit (frozen ones too: LoRA's base model).
    if (geometry.params_on_host) weights += range * dtype_size(dtype);
    if (!on_host[u]) continue;  // updated on the device, or frozen
    largest = std::max(largest, range);
    state += range * sizeof(float) + format.moment_bytes(int64_t(range));
    buffers += range * dtype_size(dtype);
  }
  const size_t nvme_stages =
      2 * size_t(file_aligned(largest * sizeof(float)) + file_aligned(format.moment_bytes(int64_t(largest))));
  return buffers + weights + (nvme ? nvme_stages : state);
}

size_t HostOptimizer::speculation_bytes(int64_t range, DType dtype, const ShardGeometry& geometry,
                                        const OptimizerStateFormat& format) {
  return size_t(range) * (sizeof(float) + (geometry.params_on_host ? 0 : dtype_size(dtype))) +
         format.moment_bytes(range);
}

HostOptimizer::HostOptimizer(ParameterStore& store, TrackingAllocator& host_allocator, uint64_t seed, int threads,
                             HostStateStorage storage, const std::vector<bool>& speculative_units)
    : store_(store), format_(store.state_format()), threads_(std::max(1, threads)) {
  const DType dtype = store.dtype();
  ZB_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
           "the CPU optimizer takes fp32, bf16 or fp16 models, not ", dtype_name(dtype));
  auto allocate_state = [&](int64_t n) {
    const Shape shape{n};
    StateArrays arrays;
    arrays.master = host_allocator.allocate(shape, DType::f32, MemoryPool::optimizer_state);
    arrays.moments = host_allocator.allocate(format_.moment_bytes(n), MemoryPool::optimizer_state);
    return arrays;
  };
  int64_t offset = 0;
  for (size_t u = 0; u < store.unit_count(); ++u) {
    Unit unit;
    if (!store.optimizer_on_host(u)) {  // the device updates it: nothing of it here
      units_.push_back(std::move(unit));
      continue;
    }
    unit.n = store.optimizer_grad(u).numel();
    const Shape shape{unit.n};
    unit.io = host_allocator.allocate(shape, dtype, MemoryPool::gradients);
    if (storage.nvme) {
      unit.file_offset = offset;
      offset += int64_t(state_bytes(unit));
    } else {
      unit.state = allocate_state(unit.n);
      if (u < speculative_units.size() && speculative_units[u]) {
        unit.spare = allocate_state(unit.n);
        if (!store.params_on_host()) unit.spare_weights = host_allocator.allocate(shape, dtype, MemoryPool::gradients);
      }
    }
    units_.push_back(std::move(unit));
  }
  if (storage.nvme) {
    file_ = std::make_unique<AioFile>(storage.path, storage.aio);
    size_t stage_bytes = 0;
    for (const Unit& unit : units_) stage_bytes = std::max(stage_bytes, state_bytes(unit));
    if (stage_bytes > 0) {
      for (Buffer& stage : nvme_stage_) stage = host_allocator.allocate(stage_bytes, MemoryPool::optimizer_state);
    }
  }
  // Initial state: the master from the layout's values, the moments zero.
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    if (!store.optimizer_on_host(u)) continue;
    const std::vector<float> initial = initial_unit_values(store.layout(), u, seed, store.optimizer_begin(u), unit.n);
    if (storage.nvme) {
      char* stage = static_cast<char*>(nvme_stage_[0].data());
      std::memset(stage, 0, state_bytes(unit));
      std::memcpy(stage, initial.data(), initial.size() * sizeof(float));
      file_->write(stage, state_bytes(unit), unit.file_offset);
    } else {
      std::memcpy(unit.state.master.data(), initial.data(), initial.size() * sizeof(float));
      std::memset(unit.state.moments.data(), 0, unit.state.moments.bytes());  // (codes and scales of 0 are 0 too)
    }
  }
  shared_->done.assign(units_.size(), true);
  shared_->speculated.assign(units_.size(), false);
  shared_->speculated_ms.assign(units_.size(), 0.0);
  worker_ = std::thread([this] { run_worker(); });
}

HostOptimizer::~HostOptimizer() {
  {
    std::unique_lock lock(shared_->mutex);
    shared_->changed.wait(lock, [this] { return !shared_->running && !shared_->job_pending; });
    shared_->stop = true;
  }
  shared_->changed.notify_all();
  worker_.join();
  wait_writes();
}

Tensor HostOptimizer::gradient_buffer(size_t u) const {
  ZB_CHECK(store_.optimizer_on_host(u), "unit ", u, " is updated on the device, not by the host optimizer");
  return units_[u].io.view(Shape{units_[u].n}, store_.dtype());
}

Tensor HostOptimizer::updated_weights(size_t u) const {
  return store_.params_on_host() ? store_.optimizer_params(u) : gradient_buffer(u);
}


void HostOptimizer::start_step(const OptimizerParams& params, const std::vector<size_t>& order) {
  size_t on_host = 0;
  for (size_t u = 0; u < units_.size(); ++u) on_host += store_.optimizer_on_host(u);
  ZB_CHECK(order.size() == on_host, "the update order names ", order.size(), " of the host's ", on_host, " units");
  for (size_t u : order) ZB_CHECK(store_.optimizer_on_host(u), "unit ", u, " is updated on the device");
  Shared& s = *shared_;
  {
    // Every unit of the last step is done, but its last NVMe writes may still run: they finish first.
    std::unique_lock lock(s.mutex);
    s.changed.wait(lock, [&] {
      return !s.running && !s.job_pending && (!settle_ || (s.landed.empty() && !s.speculating));
    });
    if (s.error) std::rethrow_exception(s.error);
    ZB_CHECK(std::all_of(s.done.begin(), s.done.end(), [](bool d) { return d; }),
             "a host optimizer step started before every unit of the last one was taken");
    s.job_params = params;
    s.job_order = order;
    // A kept speculation must be the very update asked for (every parameter equal, grad_scale 1 included).
    s.job_keeps_speculation = s.speculation_step != 0 && params == s.speculation_params;
    s.speculation_step = 0;  // gradients that land from now on are the job's
    s.done.assign(units_.size(), true);  // (the device's units stay done)
    for (size_t u : order) s.done[u] = false;
    s.job_pending = true;
  }
  s.changed.notify_all();
}

void HostOptimizer::speculate(const OptimizerParams& params) {
  Shared& s = *shared_;
  {
    std::lock_guard lock(s.mutex);
    // The last step's job may not have started yet: what was speculated for it stays for it to take (it
    // clears the record), and the worker takes no speculative work before that job has finished. Landed
    // units it has not reached are left to that job too.
    s.speculation_step = ++s.speculations_started;
    s.speculation_params = params;
    s.landed.clear();
  }
}

std::function<void()> HostOptimizer::landing_signal(size_t u) {
  if (!units_[u].speculates()) return {};
  int64_t step = 0;
  {
    std::lock_guard lock(shared_->mutex);
    step = shared_->speculation_step;
  }
  if (step == 0) return {};
  return [shared = shared_, u, step] {
    {
      std::lock_guard lock(shared->mutex);
      if (shared->speculation_step != step || shared->stop) return;  // late: the step has moved on
      shared->landed.push_back(u);
    }
    shared->changed.notify_all();
  };
}

HostOptimizer::SpeculationCounts HostOptimizer::speculation_counts() {
  std::lock_guard lock(shared_->mutex);
  return shared_->counts;
}

void HostOptimizer::wait_unit(size_t u) {
  TraceScope waiting(TraceCategory::wait, "wait_for_host_update");
  std::unique_lock lock(shared_->mutex);
  shared_->changed.wait(lock, [&] { return shared_->done[u] || shared_->error; });
  if (shared_->error) std::rethrow_exception(shared_->error);
}

bool HostOptimizer::unit_done(size_t u) {
  std::lock_guard lock(shared_->mutex);
  return shared_->done[u] && !shared_->error;
}

void HostOptimizer::finish() {
  TraceScope waiting(TraceCategory::wait, "wait_for_host_update");
  std::unique_lock lock(shared_->mutex);
  shared_->changed.wait(lock, [this] { return !shared_->running && !shared_->job_pending; });
  if (shared_->error) std::rethrow_exception(shared_->error);
}

OffloadTimes HostOptimizer::take_times() {
  std::lock_guard lock(shared_->mutex);
  OffloadTimes out = shared_->finished_times;
  shared_->finished_times = {};
  return out;
}

void HostOptimizer::mark_done(size_t u) {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->done[u] = true;
  }
  shared_->changed.notify_all();
}

// One thread does all the host's updates: a step's job when one is pending, else the speculative update of
// the unit whose gradient landed last. Last in, first out: gradients land faster than the CPU updates them,
// so backward ends with landed units still waiting, and those the job then updates before the next forward
// reaches them. Taking the newest leaves the first landed (the last blocks of the forward) waiting, so the
// job's last unit sits near the forward's end, and little forward is left once the host is done. First in,
// first out left the first blocks to the job and the forward of all the later ones after it.
void HostOptimizer::run_worker() {
  use_optimizer_threads(threads_);
  Tracer::get().name_this_thread("host update");
  Shared& s = *shared_;
  std::unique_lock lock(s.mutex);
  for (;;) {
    s.changed.wait(lock, [&] { return s.stop || s.job_pending || (s.speculation_step != 0 && !s.landed.empty()); });
    if (s.stop) return;
    if (!s.job_pending) {
      const size_t u = s.landed.back();
      s.landed.pop_back();
      const OptimizerParams params = s.speculation_params;
      s.speculating = true;
      lock.unlock();
      const auto start = Clock::now();
      speculate_unit(u, params);  // (in memory: nothing here throws but a broken invariant)
      const double ms = ms_since(start);
      lock.lock();
      s.speculated[u] = true;
      s.speculated_ms[u] = ms;
      s.speculating = false;
      s.changed.notify_all();
      continue;
    }
    s.job_pending = false;
    s.running = true;
    const OptimizerParams params = s.job_params;
    const std::vector<size_t> order = s.job_order;
    const bool keep = s.job_keeps_speculation;
    lock.unlock();
    OffloadTimes times;
    std::exception_ptr error;
    try {
      run_step(params, order, keep, times);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error) s.error = error;
    s.finished_times += times;
    s.running = false;
    s.changed.notify_all();
  }
}

void HostOptimizer::run_step(const OptimizerParams& params, const std::vector<size_t>& order, bool keep_speculation,
                             OffloadTimes& times) {
  if (file_) return update_from_file(order, params, times);
  std::vector<size_t> rest;
  std::vector<bool> speculated;
  std::vector<double> speculated_ms;
  {
    std::lock_guard lock(shared_->mutex);
    speculated = shared_->speculated;
    speculated_ms = shared_->speculated_ms;
    shared_->speculated.assign(units_.size(), false);
    shared_->landed.clear();
    const int64_t count = std::count(speculated.begin(), speculated.end(), true);
    (keep_speculation ? shared_->counts.kept : shared_->counts.discarded) += count;
  }
  for (size_t u : order) {
    if (!speculated[u]) {
      rest.push_back(u);
      continue;
    }
    if (!keep_speculation) {
      times.speculation_discarded_ms += speculated_ms[u];
      rest.push_back(u);
      continue;
    }
    // The spare holds this update: it becomes the state, and the weights' buffer the next gradient's.
    Unit& unit = units_[u];
    std::swap(unit.state, unit.spare);
    if (!unit.spare_weights.empty()) std::swap(unit.io, unit.spare_weights);
    times.cpu_ms += speculated_ms[u];
    times.speculation_kept_ms += speculated_ms[u];
    mark_done(u);
  }
  update_in_memory(rest, params, times);
}

CpuOptimizerShard HostOptimizer::shard_of(size_t u, float* master, void* moments, void* weights) const {
  const int64_t n = units_[u].n;
  const MomentPointers parts = moment_pointers(moments, n, format_);
  CpuOptimizerShard shard;
  shard.master = master;
  shard.grad = units_[u].io.data();
  shard.m = static_cast<float*>(parts.m);
  shard.v = static_cast<float*>(parts.v);
  shard.params_out = weights;
  shard.n = n;
  shard.model = store_.dtype();
  if (format_.quantized) shard.quantized = store_.quantized_moments_at(u, moments);
  return shard;
}

void HostOptimizer::speculate_unit(size_t u, const OptimizerParams& params) {
  TraceScope slice(TraceCategory::unit, store_.layout().unit(u).name + " update (speculative)");
  Unit& unit = units_[u];
  void* weights = store_.params_on_host() ? store_.optimizer_params(u).data : unit.spare_weights.data();
  CpuOptimizerShard shard = shard_of(u, static_cast<float*>(unit.spare.master.data()), unit.spare.moments.data(), weights);
  const CpuOptimizerShard state = shard_of(u, static_cast<float*>(unit.state.master.data()), unit.state.moments.data(),
                                           nullptr);
  shard.master_in = state.master;
  shard.m_in = state.m;
  shard.v_in = state.v;
  shard.quantized_in = state.quantized;
  cpu_optimizer_step(shard, params);
}

void HostOptimizer::update_unit(size_t u, float* master, void* moments, const OptimizerParams& params,
                                OffloadTimes& times) {
  TraceScope slice(TraceCategory::unit, store_.layout().unit(u).name + " update");
  const auto start = Clock::now();
  // The new weights may overwrite the gradient in place: each position is read before it is written.
  cpu_optimizer_step(shard_of(u, master, moments, updated_weights(u).data), params);
  times.cpu_ms += ms_since(start);
  mark_done(u);
}

void HostOptimizer::update_in_memory(const std::vector<size_t>& order, const OptimizerParams& params,
                                     OffloadTimes& times) {
  for (size_t u : order) {
    Unit& unit = units_[u];
    update_unit(u, static_cast<float*>(unit.state.master.data()), unit.state.moments.data(), params, times);
  }
}

void HostOptimizer::wait_writes() noexcept {
  for (std::future<double>& write : pending_write_)
    if (write.valid()) write.wait();
}

// Two staging buffers: while unit order[i] is updated in one, order[i + 1] is read into the other (after that
// buffer's write of order[i - 1] has finished); order[i]'s write-back then runs behind the next update.
void HostOptimizer::update_from_file(const std::vector<size_t>& order, const OptimizerParams& params,
                                     OffloadTimes& times) {
  auto transfer = [this](bool write, size_t u, int k) {
    return std::async(std::launch::async, [this, write, u, k] {
      TraceScope slice(TraceCategory::nvme, write ? "nvme_write" : "nvme_read", 0, double(state_bytes(units_[u])));
      if (Tracer::get().is_open()) {
        slice.set_detail(store_.layout().unit(u).name);
        slice.move_to(Tracer::get().shared_lane(write ? "nvme writes" : "nvme reads"));
      }
      const auto start = Clock::now();
      if (write) {
        file_->write(nvme_stage_[k].data(), state_bytes(units_[u]), units_[u].file_offset);
      } else {
        file_->read(nvme_stage_[k].data(), state_bytes(units_[u]), units_[u].file_offset);
      }
      return ms_since(start);
    });
  };
  // A step that failed may have left a write running; none may still use a staging buffer.
  wait_writes();
  for (std::future<double>& write : pending_write_) write = {};
  if (order.empty()) return;  // every unit is updated on the device
  std::future<double> next_read = transfer(false, order[0], 0);
  times.nvme_read_bytes += double(state_bytes(units_[order[0]]));
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t u = order[i];
    const int k = int(i % 2);
    finish_transfer(next_read, times.read_wait_ms, times.nvme_read_ms);
    if (i + 1 < order.size()) {
      finish_transfer(pending_write_[1 - k], times.write_wait_ms, times.nvme_write_ms);
      next_read = transfer(false, order[i + 1], 1 - k);
      times.nvme_read_bytes += double(state_bytes(units_[order[i + 1]]));
    }
    char* base = static_cast<char*>(nvme_stage_[k].data());
    update_unit(u, reinterpret_cast<float*>(base), base + moments_offset(units_[u]), params, times);
    times.nvme_write_bytes += double(state_bytes(units_[u]));
    pending_write_[k] = transfer(true, u, k);
  }
  for (std::future<double>& write : pending_write_) finish_transfer(write, times.write_wait_ms, times.nvme_write_ms);
}

}  // namespace zb
