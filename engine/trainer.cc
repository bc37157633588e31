#include "engine/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include "comm/local_communicator.h"
#include "core/cuda_memory.h"
#include "core/errors.h"
#include "core/strings.h"
#include "kernels/blockwise_quantization.h"
#include "kernels/clip_factor.h"
#include "offload/cpu_optimizer.h"

namespace zb {

namespace {

// What the host can still give, from /proc/meminfo's MemAvailable (0 where it cannot be read).
size_t available_host_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

ShardGeometry geometry_for(const TrainingOptions& options, const Communicator& comm) {
  try {
    validate_offload_ratio(options.offload_ratio, options.offload);
  } catch (const UsageError& e) {
    throw UsageError(cat("offload ratio: ", e.what()));
  }
  return shard_geometry(options, comm.rank(), comm.size());
}

// This rank's share of what the host can still give.
size_t host_share(const TrainingOptions& options) {
  return available_host_bytes() / size_t(std::max(1, options.ranks_per_host));
}

size_t offload_host_bytes(const TrainingOptions& options, const ParameterLayout& layout, const Communicator& comm) {
  return HostOptimizer::host_bytes(layout, options.dtype, geometry_for(options, comm),
                                   OptimizerStateFormat::of(options.optimizer), options.offload == OffloadStrategy::nvme);
}

// Host memory the device copies to and from: page-locked beside a GPU, so that the copies run at full speed
// and asynchronously; ordinary memory (of that alignment) for the CPU backend.
std::unique_ptr<RawMemory> host_memory_beside(const Backend& backend, size_t alignment = 64) {
  if (backend.device().is_cuda()) return std::make_unique<PinnedHostMemory>();
  return std::make_unique<HostMemory>(alignment);
}

// Host memory for offloaded state: page-locked beside a GPU (copies at full speed, no staging by the driver).
// An offload strategy's needs are checked first, before anything is allocated.
std::unique_ptr<RawMemory> host_memory_for(const Backend& backend, const TrainingOptions& options,
                                           const ParameterLayout& layout, const Communicator& comm) {
  if (options.offload != OffloadStrategy::none) {
    const size_t needed = offload_host_bytes(options, layout, comm);
    const size_t available = host_share(options);
    if (available && needed > available) {
      throw OutOfMemory(
          cat("the ", offload_strategy_name(options.offload), " strategy needs ", needed / 1e9,
              " GB of host memory on this rank; the host has ", available / 1e9, " GB available",
              options.ranks_per_host > 1 ? cat(" for each of its ", options.ranks_per_host, " ranks") : std::string()));
    }
  }
  return host_memory_beside(backend, AioFile::kAlignment);  // O_DIRECT transfers need 4 KiB alignment
}

// The units that get spare state for speculative updates: in the order their gradients land (the last block
// first), while the strategy's needs and the spares stay within 90% of this rank's share of the host.
std::vector<bool> speculative_units_for(const TrainingOptions& options, const ParameterStore& store,
                                        const Communicator& comm) {
  std::vector<bool> chosen(store.unit_count(), false);
  const bool in_memory =
      options.offload == OffloadStrategy::cpu_optimizer || options.offload == OffloadStrategy::cpu_full;
  if (!options.speculative_update || !in_memory) return chosen;
  const double budget = 0.9 * double(host_share(options));
  double used = double(offload_host_bytes(options, store.layout(), comm));
  for (size_t u = store.unit_count(); u-- > 0;) {
    if (!store.optimizer_on_host(u)) continue;  // updated on the device
    used += double(HostOptimizer::speculation_bytes(store.optimizer_grad(u).numel(), options.dtype, store.geometry(),
                                                    store.state_format()));
    if (used > budget) break;
    chosen[u] = true;
  }
  return chosen;
}

std::unique_ptr<Communicator> local_if_none(Communicator* comm, Backend& backend) {
  if (comm) return nullptr;
  return std::make_unique<LocalCommunicator>([&backend](const Tensor& src, Tensor& dst) { backend.copy(src, dst); });
}

// The check of the ranks' collectives wrapped around `comm` where it is asked for and there are ranks to compare.
std::unique_ptr<CheckedCommunicator> checked_if_asked(const ZeroConfig& zero, Communicator* comm) {
  if (!zero.check_collectives || comm->size() == 1) return nullptr;
  return std::make_unique<CheckedCommunicator>(*comm);
}

}  // namespace

ShardGeometry shard_geometry(const TrainingOptions& options, int rank, int world) {
  return ShardGeometry{options.zero.stage,
                       rank,
                       world,
                       options.zero.stage3_param_persistence_threshold,
                       options.offload != OffloadStrategy::none,
                       options.offload == OffloadStrategy::cpu_full,
                       options.offload_ratio,
                       options.optimizer.moments_8bit ? kQuantizationBlock : kShardAlignment};
}

StepBuffers allocate_step_buffers(TrackingAllocator& allocator, const TrainingOptions& options) {
  const Shape ids{options.batch * options.seq};
  return {allocator.allocate(ids, DType::i32, MemoryPool::workspace),
          allocator.allocate(ids, DType::i32, MemoryPool::workspace),
          allocator.allocate(Shape{4}, DType::f64, MemoryPool::workspace)};
}

Trainer::Trainer(const TrainingOptions& options, Backend& backend, TrackingAllocator& allocator, TokenSource& data,
                 Communicator* comm)
    : options_(options),
      backend_(backend),
      allocator_(allocator),
      data_(data),
      own_comm_(local_if_none(comm, backend)),
      checked_comm_(checked_if_asked(options.zero, comm ? comm : own_comm_.get())),
      comm_(checked_comm_ ? checked_comm_.get()
            : comm        ? comm
                          : own_comm_.get()),
      layout_(options.model),
      host_allocator_(host_memory_for(backend, options, layout_, *comm_)),
      store_(layout_, allocator, options.dtype, OptimizerStateFormat::of(options.optimizer),
             geometry_for(options, *comm_), &host_allocator_),
      model_(layout_, backend, allocator, options.dtype, options.batch, options.seq, options.activation_checkpointing),
      schedule_(store_, model_, backend, *comm_, allocator, options_.zero),
      staging_(host_memory_beside(backend)),
      uploads_(data, backend, staging_, options.batch * options.seq),
      pass_replay_(backend) {
  validate(options.zero);
  if (options.loss_scaling.enabled) {
    validate(options.loss_scaling);
    scaler_.emplace(options.loss_scaling);
  }
  store_.initialize(backend, options.seed);
  if (options.offload != OffloadStrategy::none) {
    HostStateStorage storage;
    if (options.offload == OffloadStrategy::nvme) {
      ZB_CHECK(!options.nvme_path.empty(), "the nvme strategy needs a folder (--nvme-path)");
      storage = {true, cat(options.nvme_path, "/zerobench_rank", comm_->rank(), "_pid", ::getpid(), ".optim"),
                 options.aio};
    }
    const std::vector<bool> speculative = speculative_units_for(options, store_, *comm_);
    speculative_units_ = std::count(speculative.begin(), speculative.end(), true);
    host_optimizer_ = std::make_unique<HostOptimizer>(
        store_, host_allocator_, options.seed, optimizer_threads_beside_training(options.ranks_per_host), storage,
        speculative);
    host_optimizer_->settle_speculation_before_step(options.settle_speculation);
    schedule_.attach(*host_optimizer_);
  }
  if (const std::string why = schedule_.why_pass_not_device_only(); !why.empty()) pass_replay_.turn_off(why);
  if (options.model.lora.dropout > 0) pass_replay_.turn_off("LoRA dropout draws new masks every pass");
  if (pass_replay_.on()) schedule_.keep_updates_in_order();
  buffers_ = allocate_step_buffers(allocator, options);
  host_scalars_ = staging_.allocate(Shape{2}, DType::f64, MemoryPool::workspace);
  auto slot = [](const Buffer& b, int index, DType dtype) {
    return Tensor(static_cast<double*>(b.data()) + index, Shape{1}, dtype, b.device());
  };
  device_ = {slot(buffers_.scalars, 0, DType::f64), slot(buffers_.scalars, 1, DType::f64),
             slot(buffers_.scalars, 2, DType::f32), slot(buffers_.scalars, 3, DType::f64)};
  backend.fill_zero(device_.zero);
  host_ = {slot(host_scalars_, 0, DType::f64), slot(host_scalars_, 1, DType::f64), {}, {}};
}

StepStats Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  const Shape ids{options_.batch * options_.seq};
  Tensor inputs = buffers_.inputs.view(ids, DType::i32), targets = buffers_.targets.view(ids, DType::i32);
  const int world = comm_->size();

  OptimizerParams params = options_.optimizer;
  params.step = applied_steps_ + 1;
  const float scale = loss_scale();
  // What the update will be if clipping leaves the gradients as they are (only the loss scale to undo): the
  // host may start on it.
  params.grad_scale = clip_factor(0, 0, 0, scale);
  if (speculative_units_ > 0) host_optimizer_->speculate(params);
  // Per micro-batch, marks before its forward, after its loss and after its backward (PassReplay::run).
  std::vector<PassReplay::Marks> passes;
  // Each rank's gradient is of its mean loss over micro-batches, scaled so that the sum over ranks is the
  // gradient of the mean over every token of the step.
  const float gradient_scale = scale / float(options_.grad_accum * world);
  const bool inject_overflow =
      step_ + 1 == options_.inject_overflow_step && comm_->rank() == options_.inject_overflow_rank;
  backend_.fill_zero(device_.loss);
  float pass_scale = gradient_scale;  // this micro-batch's
  const auto forward_and_loss = [&] {
    model_.queue_forward_and_loss(inputs, targets, pass_scale);
    backend_.accumulate_sum(model_.losses(), 1.0 / double(ids.numel() * options_.grad_accum), device_.loss);
  };
  const auto backward = [&] { model_.queue_backward(inputs); };
  const PassReplay::Segments pass{forward_and_loss, backward};
  for (int64_t micro = 0; micro < options_.grad_accum; ++micro) {
    uploads_.upload(inputs, targets);  // into the same buffers each time
    schedule_.begin_micro_batch(micro, options_.grad_accum);
    // LoRA dropout: each rank and micro-batch its own masks (the rank in the seed's top bits).
    model_.set_dropout_draw(options_.seed ^ (uint64_t(comm_->rank()) << 48),
                            uint64_t(step_) * uint64_t(options_.grad_accum) + uint64_t(micro));
    // Two kinds of pass: the first micro-batch writes the gradients, the later ones add to them; and the loss
    // scale is part of the recorded work.
    pass_scale = inject_overflow && micro == 0 ? INFINITY : gradient_scale;
    const int scale_index = recording_of_scale_.try_emplace(pass_scale, int(recording_of_scale_.size())).first->second;
    passes.push_back(pass_replay_.run((micro == 0 ? 0 : 1) + 2 * scale_index, pass));
    schedule_.end_micro_batch();
  }
  schedule_.finish_gradients();
  // The passes' collectives are compared before the host waits for anything (a mismatch may hang the device);
  // the optimizer's (the norm's sum, the weights' gathers) count with the next step's, on every rank alike.
  if (checked_comm_) checked_comm_->end_step(step_ + 1);

  const auto optimizer_start = backend_.record_event();
  double loss = 0, sum_of_squares = 0;
  EventSpan update_span;  // when queued aside
  if (host_optimizer_) {
    // The host updates the weights, so it needs the loss and the norm now.
    backend_.copy(device_.loss, host_.loss);
    loss = mean_loss();
    sum_of_squares = schedule_.gradient_sum_of_squares();
    params.grad_scale = clip_factor(sum_of_squares, scaler_ ? 0.0 : loss, options_.grad_clip, scale);
    params.skip = overflowed(sum_of_squares);
    if (!params.skip) check_finite(loss, std::sqrt(sum_of_squares));
    schedule_.start_host_update(params);  // runs on; the next forward takes each unit as it is done
    // Units whose state stayed on the device (an offload ratio below 1) update there meanwhile.
    for (size_t u = 0; u < store_.unit_count(); ++u)
      if (store_.trainable(u) && !store_.optimizer_on_host(u) && !params.skip) update_on_device(u, params);
  } else {
    // Clipped by a factor the device computes (the update skips itself when it is not finite); the loss and
    // the norm come to the host with the end of the step.
    schedule_.gradient_sum_of_squares_into(device_.sum_of_squares);
    // With loss scaling an overflow is of the gradients alone, whose sum of squares every rank shares (a rank's
    // own loss is not shared: a rank whose loss alone were not finite would skip where the others update).
    backend_.clip_factor(device_.sum_of_squares, scaler_ ? device_.zero : device_.loss, options_.grad_clip, scale,
                         device_.clip_factor);
    params.grad_factor = device_.clip_factor.as<float>();
    // Beside the next step's forward where it can be, which waits for each unit's update just before the unit:
    // the update is memory-bound and the forward mostly not.
    update_span = schedule_.update_on_device([&](size_t u) { update_on_device(u, params); });
    backend_.copy_queued(device_.loss, host_.loss);
    backend_.copy_queued(device_.sum_of_squares, host_.sum_of_squares);
  }
  const auto optimizer_end = backend_.record_event();
  schedule_.publish_parameters();
  uploads_.prefetch();  // the next step's first batch, drawn while the device works
  backend_.synchronize();
  if (!host_optimizer_) {
    loss = mean_loss();
    sum_of_squares = *host_.sum_of_squares.as<double>();
  }
  // (Every rank has the same loss and sum of squares, so all of them skip, or stop, together.)
  const double norm = std::sqrt(sum_of_squares) / scale;
  const bool overflow = overflowed(sum_of_squares);
  if (!overflow) check_finite(loss, norm);
  if (scaler_) scaler_->update(overflow);
  ++step_;
  if (!overflow) ++applied_steps_;
  StepStats stats{step_, loss, norm, 0, options_.grad_accum * options_.batch * options_.seq * world, 0, 0, 0, {}, {}};
  stats.loss_scale = scale;
  stats.skipped = overflow;
  for (const PassReplay::Marks& marks : passes) {
    stats.forward_ms += backend_.elapsed_ms(*marks[0], *marks[1]);
    stats.backward_ms += backend_.elapsed_ms(*marks[1], *marks[2]);
  }
  stats.comm = schedule_.take_stats();
  if (host_optimizer_) {
    // The host's update of this step runs on into the next one; these are the phases finished so far (the
    // previous step's update, and this step's copies and waits).
    stats.offload = schedule_.take_offload_times();
    stats.offload += host_optimizer_->take_times();
  }
  // (With offload: the norm, and the update of the units whose state stayed on the device, if any.)
  stats.optimizer_ms = backend_.elapsed_ms(*optimizer_start, *optimizer_end);
  // The previous step's update, queued aside: this step's forward has waited for all of it.
  if (previous_update_span_.first) {
    stats.update_aside_ms = backend_.elapsed_ms(*previous_update_span_.first, *previous_update_span_.second);
  }
  previous_update_span_ = std::move(update_span);
  // The clock stops last: were reading a phase's time ever to wait for the device (an event of work that runs
  // on past the step), that wait belongs to some step's time, not to none.
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

ParameterStore& Trainer::store() {
  schedule_.wait_updates_aside();
  schedule_.wait_all();  // (pipelined updates: the gathers of the new weights)
  backend_.synchronize();
  return store_;
}

void Trainer::update_on_device(size_t u, const OptimizerParams& params) {
  Tensor master = store_.master(u), model_copy = store_.model_copy(u);
  if (store_.state_format().quantized) {
    backend_.optimizer_step_8bit(master, store_.optimizer_grad(u), store_.quantized_moments(u), model_copy, params);
    return;
  }
  Tensor m = store_.first_moment(u), v = store_.second_moment(u);
  backend_.optimizer_step(master, store_.optimizer_grad(u), m, v, model_copy, params);
}

bool Trainer::overflowed(double sum_of_squares) const {
  return scaler_ && !std::isfinite(sum_of_squares);
}

double Trainer::mean_loss() {
  return comm_->sum_over_ranks(*host_.loss.as<double>()) / comm_->size();
}

// Every rank sees the same loss and norm, so all of them stop together on a non-finite one.
void Trainer::check_finite(double loss, double norm) const {
  if (!std::isfinite(loss)) throw Error(cat("the loss is ", loss, " at step ", step_ + 1));
  if (!std::isfinite(norm)) throw Error(cat("the gradient norm is ", norm, " at step ", step_ + 1));
}

std::vector<std::vector<float>> Trainer::gather_parameters() {
  schedule_.complete_updates();
  schedule_.wait_all();
  std::vector<std::vector<float>> out;
  for (size_t u = 0; u < store_.unit_count(); ++u) {
    const int64_t padded = store_.padded_numel(u);
    Buffer gathered, as_f32;
    Tensor whole;
    if (store_.resident_params(u)) {
      whole = store_.params(u);
    } else {
      gathered = allocator_.allocate(Shape{padded}, store_.dtype(), MemoryPool::workspace);
      whole = gathered.view(Shape{padded}, store_.dtype());
      comm_->wait(gather_unit_weights(*comm_, store_, u, whole));
    }
    as_f32 = allocator_.allocate(Shape{padded}, DType::f32, MemoryPool::workspace);
    Tensor f32 = as_f32.view(Shape{padded}, DType::f32);
    backend_.convert(whole, f32);
    std::vector<float> host(padded);
    Tensor host_view(host.data(), Shape{padded}, DType::f32, Device::cpu());
    backend_.copy(f32, host_view);
    host.resize(layout_.unit(u).numel);
    out.push_back(std::move(host));
  }
  return out;
}

}  // namespace zb
