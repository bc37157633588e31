#include "engine/host_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "offload/cpu_optimizer.h"

namespace zb {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int64_t padded_bytes(int64_t floats) {
  const int64_t a = int64_t(AioFile::kAlignment);
  return (floats * int64_t(sizeof(float)) + a - 1) / a * a;
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

size_t HostOptimizer::state_bytes(const Unit& unit) const {
  return size_t(padded_bytes(unit.n) * (second_moment_ ? 3 : 2));
}

size_t HostOptimizer::host_bytes(const ParameterLayout& layout, DType dtype, const ShardGeometry& geometry,
                                 bool needs_second_moment, bool nvme) {
  const size_t state_arrays = needs_second_moment ? 3 : 2;
  size_t state = 0, buffers = 0, weights = 0, largest = 0;
  for (const ParameterUnit& unit : layout.units()) {
    const size_t range = size_t(
        ParameterStore::optimizer_numel(ParameterStore::padded_numel(unit.numel, geometry.world), geometry));
    largest = std::max(largest, range);
    state += range * sizeof(float) * state_arrays;
    buffers += range * dtype_size(dtype);
    if (geometry.params_on_host) weights += range * dtype_size(dtype);  // the store keeps the range's weights
  }
  const size_t nvme_stages = 2 * size_t(padded_bytes(int64_t(largest))) * state_arrays;
  return buffers + weights + (nvme ? nvme_stages : state);
}

HostOptimizer::HostOptimizer(ParameterStore& store, TrackingAllocator& host_allocator, uint64_t seed,
                             bool needs_second_moment, HostStateStorage storage)
    : store_(store), second_moment_(needs_second_moment) {
  const DType dtype = store.dtype();
  ZB_CHECK(dtype == DType::f32 || dtype == DType::bf16, "the CPU optimizer takes fp32 or bf16 models, not ",
           dtype_name(dtype));
  int64_t offset = 0;
  for (size_t u = 0; u < store.unit_count(); ++u) {
    Unit unit;
    unit.n = store.optimizer_grad(u).numel();
    const Shape shape{unit.n};
    unit.io = host_allocator.allocate(shape, dtype, MemoryPool::gradients);
    if (storage.nvme) {
      unit.file_offset = offset;
      offset += int64_t(state_bytes(unit));
    } else {
      unit.master = host_allocator.allocate(shape, DType::f32, MemoryPool::optimizer_state);
      unit.m = host_allocator.allocate(shape, DType::f32, MemoryPool::optimizer_state);
      if (needs_second_moment) unit.v = host_allocator.allocate(shape, DType::f32, MemoryPool::optimizer_state);
    }
    units_.push_back(std::move(unit));
  }
  if (storage.nvme) {
    file_ = std::make_unique<AioFile>(storage.path, storage.aio);
    size_t stage_bytes = 0;
    for (const Unit& unit : units_) stage_bytes = std::max(stage_bytes, state_bytes(unit));
    for (Buffer& stage : nvme_stage_) stage = host_allocator.allocate(stage_bytes, MemoryPool::optimizer_state);
  }
  // Initial state: the master from the layout's values, the moments zero.
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    const std::vector<float> initial = initial_unit_values(store.layout(), u, seed, store.optimizer_begin(u), unit.n);
    if (storage.nvme) {
      char* stage = static_cast<char*>(nvme_stage_[0].data());
      std::memset(stage, 0, state_bytes(unit));
      std::memcpy(stage, initial.data(), initial.size() * sizeof(float));
      file_->write(stage, state_bytes(unit), unit.file_offset);
    } else {
      std::memcpy(unit.master.data(), initial.data(), initial.size() * sizeof(float));
      std::memset(unit.m.data(), 0, unit.m.bytes());
      if (needs_second_moment) std::memset(unit.v.data(), 0, unit.v.bytes());
    }
  }
  done_.assign(units_.size(), true);
  worker_ = std::thread([this] { run_worker(); });
}

HostOptimizer::~HostOptimizer() {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return !running_ && !job_pending_; });
    stop_ = true;
  }
  changed_.notify_all();
  worker_.join();
  wait_writes();
}

Tensor HostOptimizer::gradient_buffer(size_t u) const {
  return units_[u].io.view(Shape{units_[u].n}, store_.dtype());
}

Tensor HostOptimizer::updated_weights(size_t u) const {
  return store_.params_on_host() ? store_.optimizer_params(u) : gradient_buffer(u);
}

void HostOptimizer::start_step(const OptimizerParams& params, const std::vector<size_t>& order) {
  ZB_CHECK(order.size() == units_.size(), "the update order names ", order.size(), " of ", units_.size(), " units");
  {
    // Every unit of the last step is done, but its last NVMe writes may still run: they finish first.
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return !running_ && !job_pending_; });
    if (error_) std::rethrow_exception(error_);
    ZB_CHECK(std::all_of(done_.begin(), done_.end(), [](bool d) { return d; }),
             "a host optimizer step started before every unit of the last one was taken");
    job_params_ = params;
    job_order_ = order;
    done_.assign(units_.size(), false);
    job_pending_ = true;
  }
  changed_.notify_all();
}

void HostOptimizer::wait_unit(size_t u) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return done_[u] || error_; });
  if (error_) std::rethrow_exception(error_);
}

bool HostOptimizer::unit_done(size_t u) {
  std::lock_guard lock(mutex_);
  return done_[u] && !error_;
}

void HostOptimizer::finish() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !running_ && !job_pending_; });
  if (error_) std::rethrow_exception(error_);
}

OffloadTimes HostOptimizer::take_times() {
  std::lock_guard lock(mutex_);
  OffloadTimes out = finished_times_;
  finished_times_ = {};
  return out;
}

void HostOptimizer::mark_done(size_t u) {
  {
    std::lock_guard lock(mutex_);
    done_[u] = true;
  }
  changed_.notify_all();
}

void HostOptimizer::run_worker() {
  for (;;) {
    OptimizerParams params;
    std::vector<size_t> order;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [this] { return stop_ || job_pending_; });
      if (stop_) return;
      job_pending_ = false;
      running_ = true;
      params = job_params_;
      order = job_order_;
    }
    OffloadTimes times;
    std::exception_ptr error;
    try {
      if (file_) {
        update_from_file(order, params, times);
      } else {
        update_in_memory(order, params, times);
      }
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      if (error) error_ = error;
      finished_times_ += times;
      running_ = false;
    }
    changed_.notify_all();
  }
}

void HostOptimizer::update_unit(size_t u, float* master, float* m, float* v, const OptimizerParams& params,
                                OffloadTimes& times) {
  const auto start = Clock::now();
  // The new weights may overwrite the gradient in place: each position is read before it is written.
  cpu_optimizer_step({master, units_[u].io.data(), m, v, updated_weights(u).data, units_[u].n,
                      store_.dtype() == DType::f32},
                     params);
  times.cpu_ms += ms_since(start);
  mark_done(u);
}

void HostOptimizer::update_in_memory(const std::vector<size_t>& order, const OptimizerParams& params,
                                     OffloadTimes& times) {
  for (size_t u : order) {
    Unit& unit = units_[u];
    update_unit(u, static_cast<float*>(unit.master.data()), static_cast<float*>(unit.m.data()),
                static_cast<float*>(unit.v.data()), params, times);
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
    float* base = static_cast<float*>(nvme_stage_[k].data());
    const int64_t stride = padded_bytes(units_[u].n) / int64_t(sizeof(float));
    update_unit(u, base, base + stride, second_moment_ ? base + 2 * stride : nullptr, params, times);
    times.nvme_write_bytes += double(state_bytes(units_[u]));
    pending_write_[k] = transfer(true, u, k);
  }
  for (std::future<double>& write : pending_write_) finish_transfer(write, times.write_wait_ms, times.nvme_write_ms);
}

}  // namespace zb
