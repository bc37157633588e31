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

}  // namespace

size_t HostOptimizer::state_bytes(const Unit& unit) const {
  return size_t(padded_bytes(unit.n) * (second_moment_ ? 3 : 2));
}

size_t HostOptimizer::host_bytes(const ParameterStore& store, bool needs_second_moment, bool nvme) {
  const size_t state_arrays = needs_second_moment ? 3 : 2;
  size_t state = 0, largest = 0;
  for (size_t u = 0; u < store.unit_count(); ++u) {
    const size_t n = size_t(store.optimizer_grad(u).numel());
    largest = std::max(largest, n);
    state += n * sizeof(float) * state_arrays;
  }
  const size_t stages = 2 * largest * dtype_size(store.dtype());
  return stages + (nvme ? 2 * size_t(padded_bytes(int64_t(largest))) * state_arrays : state);
}

HostOptimizer::HostOptimizer(ParameterStore& store, Backend& backend, TrackingAllocator& host_allocator, uint64_t seed,
                             bool needs_second_moment, HostStateStorage storage)
    : store_(store), backend_(backend), second_moment_(needs_second_moment) {
  const DType dtype = store.dtype();
  ZB_CHECK(dtype == DType::f32 || dtype == DType::bf16, "the CPU optimizer takes fp32 or bf16 models, not ",
           dtype_name(dtype));
  int64_t largest = 0, offset = 0;
  for (size_t u = 0; u < store.unit_count(); ++u) {
    Unit unit;
    unit.n = store.optimizer_grad(u).numel();
    largest = std::max(largest, unit.n);
    if (storage.nvme) {
      unit.file_offset = offset;
      offset += int64_t(state_bytes(unit));
    } else {
      const Shape shape{unit.n};
      unit.master = host_allocator.allocate(shape, DType::f32, MemoryPool::optimizer_state);
      unit.m = host_allocator.allocate(shape, DType::f32, MemoryPool::optimizer_state);
      if (needs_second_moment) unit.v = host_allocator.allocate(shape, DType::f32, MemoryPool::optimizer_state);
    }
    units_.push_back(std::move(unit));
  }
  grad_stage_ = host_allocator.allocate(Shape{largest}, dtype, MemoryPool::gradients);
  weights_stage_ = host_allocator.allocate(Shape{largest}, dtype, MemoryPool::parameters);
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
}

HostOptimizer::~HostOptimizer() {
  // Writes still running use the staging buffers: let them finish (their errors no longer matter).
  for (std::future<void>& write : pending_write_)
    if (write.valid()) write.wait();
}

void HostOptimizer::update_unit(size_t u, float* master, float* m, float* v, const OptimizerParams& params) {
  const DType dtype = store_.dtype();
  const Shape shape{units_[u].n};
  auto start = Clock::now();
  Tensor host_grad = grad_stage_.view(shape, dtype);
  backend_.copy(store_.optimizer_grad(u), host_grad);  // returns when the gradient is on the host
  times_.copies_ms += ms_since(start);
  start = Clock::now();
  cpu_optimizer_step({master, grad_stage_.data(), m, v, weights_stage_.data(), units_[u].n, dtype == DType::f32},
                     params);
  times_.cpu_ms += ms_since(start);
  start = Clock::now();
  Tensor target = store_.optimizer_params(u);
  backend_.copy(weights_stage_.view(shape, dtype), target);
  times_.copies_ms += ms_since(start);
}

void HostOptimizer::step(const OptimizerParams& params) {
  times_ = {};
  if (file_) return step_nvme(params);
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    update_unit(u, static_cast<float*>(unit.master.data()), static_cast<float*>(unit.m.data()),
                static_cast<float*>(unit.v.data()), params);
  }
}

// Two staging buffers: while unit u is updated in one, unit u + 1 is read into the other (after that
// buffer's write of unit u - 1 has finished); unit u's write-back then runs behind the next update.
void HostOptimizer::step_nvme(const OptimizerParams& params) {
  auto read = [this](size_t u, int k) {
    times_.nvme_read_bytes += double(state_bytes(units_[u]));
    return std::async(std::launch::async, [this, u, k] {
      file_->read(nvme_stage_[k].data(), state_bytes(units_[u]), units_[u].file_offset);
    });
  };
  auto finish = [this](std::future<void>& pending, double& wait_ms) {
    if (!pending.valid()) return;
    const auto start = Clock::now();
    pending.get();  // rethrows the transfer's IoError
    wait_ms += ms_since(start);
  };
  // A step that failed may have left a write running; none may still use a staging buffer.
  for (std::future<void>& write : pending_write_)
    if (write.valid()) write.wait();
  std::future<void> next_read = read(0, 0);
  for (size_t u = 0; u < units_.size(); ++u) {
    const int k = int(u % 2);
    finish(next_read, times_.read_wait_ms);
    if (u + 1 < units_.size()) {
      finish(pending_write_[1 - k], times_.write_wait_ms);
      next_read = read(u + 1, 1 - k);
    }
    float* base = static_cast<float*>(nvme_stage_[k].data());
    const int64_t stride = padded_bytes(units_[u].n) / int64_t(sizeof(float));
    update_unit(u, base, base + stride, second_moment_ ? base + 2 * stride : nullptr, params);
    times_.nvme_write_bytes += double(state_bytes(units_[u]));
    pending_write_[k] = std::async(std::launch::async, [this, u, k] {
      file_->write(nvme_stage_[k].data(), state_bytes(units_[u]), units_[u].file_offset);
    });
  }
  for (std::future<void>& write : pending_write_) finish(write, times_.write_wait_ms);
}

}  // namespace zb
