#include "engine/zero_schedule.h"

#include <algorithm>

#include "core/check.h"

namespace zb {

ZeroSchedule::ZeroSchedule(ParameterStore& store, Transformer& model, Backend& backend, Communicator& comm,
                           TrackingAllocator& allocator, const ZeroConfig& config)
    : store_(store),
      model_(model),
      backend_(backend),
      comm_(comm),
      allocator_(allocator),
      config_(config),
      synchronous_comm_(backend.device().is_cpu()),
      param_slots_(allocator, store.dtype(), MemoryPool::parameters),
      grad_slots_(allocator, store.dtype(), MemoryPool::gradients, /*rotation=*/2) {
  const ParameterLayout& layout = store.layout();
  const size_t units = store.unit_count();
  const int64_t layers = layout.config().n_layer;
  // The order in which passes use units (see unit_access.h), for prefetching.
  // (A block's adapters, under LoRA, are used together with it: their unit follows the block's in both.)
  forward_order_.push_back(layout.embedding_unit());
  for (int64_t l = 0; l < layers; ++l) {
    forward_order_.push_back(layout.block_unit(l));
    if (layout.has_adapters()) forward_order_.push_back(layout.adapter_unit(l));
  }
  forward_order_.push_back(layout.final_unit());
  backward_order_.push_back(layout.final_unit());
  if (layout.config().tied_embeddings) backward_order_.push_back(layout.embedding_unit());
  for (int64_t l = layers - 1; l >= 0; --l) {
    backward_order_.push_back(layout.block_unit(l));
    if (layout.has_adapters()) backward_order_.push_back(layout.adapter_unit(l));
  }
  // (Untied embeddings are not read in backward: nothing to prefetch for them.)

  held_params_.assign(units, nullptr);
  held_grads_.assign(units, nullptr);
  params_ready_.assign(units, 0);
  gather_pending_.assign(units, false);
  updated_aside_.resize(units);
  staging_.resize(units);
  // Whatever is held whole is bound once; the rest is bound as it is gathered. (A frozen unit's gradient views
  // are empty: its backward computes none.)
  for (size_t u = 0; u < units; ++u) {
    if (store.resident_params(u)) model.bind_unit_parameters(u, store.params(u));
    if (store.whole_grads()) model.bind_unit_gradients(u, store.grads(u));
  }
  model.set_unit_access(this);
}

template <typename Collective>
CommTicket ZeroSchedule::issue(Collective&& collective) {
  const auto start = std::chrono::steady_clock::now();
  const CommTicket ticket = collective();
  if (synchronous_comm_) {
    host_comm_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  last_ticket_ = std::max(last_ticket_, ticket);
  return ticket;
}

void ZeroSchedule::wait_exposed(CommTicket ticket) {
  if (ticket == 0 || synchronous_comm_) return;
  auto before = backend_.record_event();
  comm_.wait(ticket);
  waits_.emplace_back(std::move(before), backend_.record_event());
}

void ZeroSchedule::begin_micro_batch(int64_t micro, int64_t count) {
  micro_ = micro;
  micro_count_ = count;
}

void ZeroSchedule::end_micro_batch() {
  // Stages 2-3 after the first micro-batch: each unit's reduced gradient landed in staging; add it to the
  // shard. By now the reduce-scatters have had the whole backward to finish.
  for (const auto& [unit, ticket] : pending_adds_) {
    wait_exposed(ticket);
    Tensor shard = store_.grad_shard(unit);
    const Tensor staged = staging_[unit].view(shard.shape, shard.dtype);
    backend_.residual_forward(shard, staged, shard);
    if (micro_ + 1 == micro_count_) gradient_final(unit);
  }
  pending_adds_.clear();
}

CommTicket gather_unit_weights(Communicator& comm, const ParameterStore& store, size_t unit, Tensor& whole) {
  if (store.params_on_host() && store.whole_params(unit)) return comm.copy(store.params(unit), whole);
  Tensor shard = store.param_shard(unit);
  if (store.params_on_host()) {  // the shard comes up into the rank's slice of `whole`, gathered in place
    Tensor slice = whole.flat_slice(store.shard_begin(unit), store.shard_begin(unit) + shard.numel());
    comm.copy(shard, slice);
    shard = slice;
  }
  comm.set_subject(int64_t(unit));
  return comm.all_gather(shard, whole);
}

UnitSlots::Slot* ZeroSchedule::gather(size_t unit) {
  wait_update_aside(unit);  // (pipelined updates) the gather reads the shard the update writes
  ensure_updated(unit);
  UnitSlots::Slot* slot = param_slots_.take(int64_t(unit), store_.padded_numel(unit));
  Tensor whole = param_slots_.view(*slot);
  slot->ticket = issue([&] { return gather_unit_weights(comm_, store_, unit, whole); });
  if (!store_.whole_params(unit)) stats_.all_gather_bytes += double(whole.bytes());  // (else only copied up)
  return slot;
}

void ZeroSchedule::attach(HostOptimizer& host) {
  OffloadPipeline::Schedule schedule{
      .issue = [this](const std::function<CommTicket()>& collective) { return issue(collective); },
      .send_up = [this](size_t unit, const Tensor& updated_weights) { send_up(unit, updated_weights); }};
  offload_ = std::make_unique<OffloadPipeline>(host, store_, comm_, forward_order_, std::move(schedule));
}

void ZeroSchedule::start_host_update(const OptimizerParams& params) {
  ZB_CHECK(offload_ != nullptr, "start_host_update without a host optimizer");
  complete_updates();  // (a no-op in training: the last forward needed every unit)
  offload_->start_update(params);
}

void ZeroSchedule::send_up(size_t unit, const Tensor& updated_weights) {
  Tensor target = store_.optimizer_params(unit);
  params_ready_[unit] = issue([&] { return comm_.copy(updated_weights, target); });
  // The other ranks' shards come next. (A stage 3 shard is gathered by gather(), after this copy on the same
  // stream.)
  if (upload_gathers(store_, comm_, unit)) gather_units({unit});
}

void ZeroSchedule::complete_updates() {
  wait_updates_aside();
  for (size_t unit = 0; unit < store_.unit_count(); ++unit) ensure_updated(unit);
}

EventSpan ZeroSchedule::update_on_device(const std::function<void(size_t unit)>& update) {
  issue_every_pending_gather();  // (a unit no pass read since the last update: its gather reads the shard first)
  if (!can_update_aside() || !backend_.begin_aside()) {
    for (size_t unit : forward_order_)
      if (store_.trainable(unit)) update(unit);
    return {};
  }
  auto first = backend_.record_event();
  for (size_t unit : forward_order_) {
    if (!store_.trainable(unit)) continue;
    update(unit);
    updated_aside_[unit] = backend_.record_event();
  }
  auto last = backend_.record_event();
  backend_.end_aside();
  return {std::move(first), std::move(last)};
}

void ZeroSchedule::wait_update_aside(size_t unit) {
  if (!updated_aside_[unit]) return;
  backend_.queue_wait(*updated_aside_[unit]);
  updated_aside_[unit].reset();
}

void ZeroSchedule::acquire_params(size_t unit, const std::vector<size_t>& order) {
  wait_update_aside(unit);
  ensure_updated(unit);
  if (store_.resident_params(unit)) {
    issue_pending_gather(unit);
    prefetch_pending_gathers(unit, order);
    wait_exposed(params_ready_[unit]);
    params_ready_[unit] = 0;
    return;
  }
  ZB_CHECK(held_params_[unit] == nullptr, "unit ", unit, " acquired twice");
  UnitSlots::Slot* slot = param_slots_.find(int64_t(unit));
  if (slot) {
    slot->in_use = true;  // cached from an earlier use, or reserved by a prefetch
  } else {
    slot = gather(unit);
  }
  held_params_[unit] = slot;
  prefetch_after(unit, order);
  wait_exposed(slot->ticket);
  model_.bind_unit_parameters(unit, param_slots_.view(*slot));
}

void ZeroSchedule::prefetch_after(size_t unit, const std::vector<size_t>& order) {
  if (config_.stage3_prefetch_bucket_size <= 0) return;
  auto it = std::find(order.begin(), order.end(), unit);
  int64_t budget = config_.stage3_prefetch_bucket_size;
  bool any = false;
  for (++it; it != order.end(); ++it) {
    const size_t next = *it;
    if (store_.resident_params(next)) continue;
    // Prefetching must not wait for the CPU: it stops at a unit the host updates and the forward has not
    // reached, on every rank alike (whether the host is done differs between ranks, and a prefetch changes
    // which units the slots keep for backward, so how many gathers each rank issues).
    if (offload_ && offload_->not_yet_asked(next)) break;
    if (any && budget < store_.padded_numel(next)) break;
    budget -= store_.padded_numel(next);
    any = true;
    UnitSlots::Slot* slot = param_slots_.find(int64_t(next));
    if (slot) {
      slot->in_use = true;  // keep it from being taken before its turn
    } else {
      gather(next);
    }
  }
}

void ZeroSchedule::issue_pending_gather(size_t unit) {
  if (!gather_pending_[unit]) return;
  wait_update_aside(unit);  // the gather reads the shard the update writes
  gather_pending_[unit] = false;
  gather_units({unit});
}

void ZeroSchedule::prefetch_pending_gathers(size_t unit, const std::vector<size_t>& order) {
  auto it = std::find(order.begin(), order.end(), unit);
  if (it == order.end()) return;
  int64_t budget = config_.allgather_bucket_size;
  bool any = false;
  for (++it; it != order.end(); ++it) {
    const size_t next = *it;
    if (!gather_pending_[next]) continue;
    if (any && budget < store_.padded_numel(next)) break;
    budget -= store_.padded_numel(next);
    any = true;
    issue_pending_gather(next);
  }
}

void ZeroSchedule::issue_every_pending_gather() {
  for (size_t unit : forward_order_) issue_pending_gather(unit);
}

void ZeroSchedule::release_params(size_t unit) {
  if (store_.resident_params(unit) || held_params_[unit] == nullptr) return;  // resident, or not read (backward)
  param_slots_.release(held_params_[unit]);
  held_params_[unit] = nullptr;
}

GradWrite ZeroSchedule::backward_needs(size_t unit, bool reads_weights) {
  wait_update_aside(unit);  // (the forward waited already, unless it never read the unit) its gradient is next
  if (reads_weights) acquire_params(unit, backward_order_);
  if (!store_.trainable(unit)) return GradWrite::overwrite;  // (no gradient: nothing is written)
  // Whole gradients: the first micro-batch writes them (their gaps and padding were zeroed when the store
  // was made, and nothing writes there), later ones add to them.
  if (store_.whole_grads()) return micro_ == 0 ? GradWrite::overwrite : GradWrite::add;
  // A slot holds this micro-batch's gradient alone: written, after zeroing what the backward does not write
  // unless those ranges are zero already (the slot's last unit had the same gaps, as a model's blocks all do:
  // zeroing gpt2-xl's seven 64-element gaps a block each time cost ~340 small memsets a step).
  UnitSlots::Slot* slot = grad_slots_.take(int64_t(unit), store_.padded_numel(unit));
  wait_exposed(slot->ticket);  // the reduce-scatter that last read this slot
  Tensor whole = grad_slots_.view(*slot);
  auto gaps = store_.layout().unit(unit).uncovered_ranges(whole.numel());
  if (gaps != slot->zero_ranges) {
    for (const auto& [begin, end] : gaps) {
      Tensor gap = whole.flat_slice(begin, end);
      backend_.fill_zero(gap);
    }
    slot->zero_ranges = std::move(gaps);
  }
  model_.bind_unit_gradients(unit, whole);
  held_grads_[unit] = slot;
  return GradWrite::overwrite;
}

void ZeroSchedule::backward_done(size_t unit) {
  release_params(unit);
  if (!store_.trainable(unit)) return;
  const bool last_micro = micro_ + 1 == micro_count_;
  if (store_.whole_grads()) {
    if (!last_micro) return;  // stages 0-1 reduce once per step
    if (comm_.size() == 1) {  // one rank's sum is its own gradient: final now
      gradient_final(unit);
      return;
    }
    unreduced_.push_back(unit);
    unreduced_numel_ += store_.padded_numel(unit);
    if (config_.overlaps() && unreduced_numel_ >= config_.reduce_bucket_size) {
      reduce_units(unreduced_);  // a full bucket, while backward goes on
      unreduced_.clear();
      unreduced_numel_ = 0;
    }
    return;  // without overlap_comm, finish_gradients reduces the collected units, bucket by bucket
  }
  UnitSlots::Slot* slot = held_grads_[unit];
  ZB_CHECK(slot != nullptr, "unit ", unit, " gradient finished but never started");
  const Tensor whole = grad_slots_.view(*slot);
  Tensor target = store_.grad_shard(unit);
  if (micro_ > 0) {
    if (staging_[unit].empty()) staging_[unit] = allocator_.allocate(target.shape, target.dtype, MemoryPool::gradients);
    target = staging_[unit].view(target.shape, target.dtype);
  }
  comm_.set_subject(int64_t(unit));
  const CommTicket ticket = issue([&] { return comm_.reduce_scatter_sum(whole, target); });
  stats_.reduce_scatter_bytes += double(whole.bytes());
  last_reduction_ = ticket;
  slot->ticket = ticket;
  grad_slots_.release(slot);
  held_grads_[unit] = nullptr;
  if (micro_ > 0) {
    pending_adds_.emplace_back(unit, ticket);
  } else if (last_micro) {
    gradient_final(unit);
  }
  if (!config_.overlaps()) wait_exposed(ticket);
}

template <typename IssueBucket>
void ZeroSchedule::for_each_bucket(const std::vector<size_t>& units, int64_t bucket_numel,
                                   IssueBucket&& issue_bucket) const {
  std::vector<size_t> bucket;
  int64_t numel = 0;
  for (size_t unit : units) {
    bucket.push_back(unit);
    numel += store_.padded_numel(unit);
    if (numel >= bucket_numel) {
      issue_bucket(bucket);
      bucket.clear();
      numel = 0;
    }
  }
  if (!bucket.empty()) issue_bucket(bucket);
}

void ZeroSchedule::reduce_units(const std::vector<size_t>& units) {
  const bool all_reduce = store_.geometry().stage == 0;
  last_reduction_ = issue([&] {
    CommTicket ticket = 0;
    comm_.begin_group();
    for (size_t unit : units) {
      Tensor whole = store_.grads(unit);
      comm_.set_subject(int64_t(unit));
      if (all_reduce) {
        ticket = comm_.all_reduce_sum(whole);
        stats_.all_reduce_bytes += double(whole.bytes());
      } else {
        Tensor shard = store_.grad_shard(unit);  // in place: the rank's slice of the whole gradient
        ticket = comm_.reduce_scatter_sum(whole, shard);
        stats_.reduce_scatter_bytes += double(whole.bytes());
      }
    }
    comm_.end_group();
    return ticket;
  });
  for (size_t unit : units) gradient_final(unit);
}

void ZeroSchedule::gather_units(const std::vector<size_t>& units) {
  const CommTicket ticket = issue([&] {
    CommTicket t = 0;
    comm_.begin_group();
    for (size_t unit : units) {
      Tensor whole = store_.params(unit);
      comm_.set_subject(int64_t(unit));
      t = comm_.all_gather(store_.param_shard(unit), whole);  // in place: the shard is a slice of whole
      stats_.all_gather_bytes += double(whole.bytes());
    }
    comm_.end_group();
    return t;
  });
  for (size_t unit : units) params_ready_[unit] = ticket;
}

void ZeroSchedule::finish_gradients() {
  // What backward left unreduced (all of it without overlap_comm) goes out now, in backward order.
  for_each_bucket(unreduced_, config_.reduce_bucket_size, [&](const std::vector<size_t>& b) { reduce_units(b); });
  unreduced_.clear();
  unreduced_numel_ = 0;
  wait_exposed(last_reduction_);
  last_reduction_ = 0;
  grad_slots_.settle();  // every reduce-scatter that read a gradient slot is done
}

std::vector<Tensor> ZeroSchedule::optimizer_gradients() const {
  std::vector<Tensor> grads;
  for (size_t u = 0; u < store_.unit_count(); ++u)
    if (store_.trainable(u)) grads.push_back(store_.optimizer_grad(u));
  return grads;
}

// Stage 0's gradients are whole and identical on every rank; elsewhere each rank has its shards, and the
// square of the norm is the sum over ranks.
double ZeroSchedule::gradient_sum_of_squares() {
  const double local = backend_.sum_of_squares(optimizer_gradients());
  return store_.sharded_optimizer() ? comm_.sum_over_ranks(local) : local;
}

void ZeroSchedule::gradient_sum_of_squares_into(Tensor& total) {
  backend_.sum_of_squares_into(optimizer_gradients(), total);
  if (!store_.sharded_optimizer()) return;
  comm_.set_subject(-1);
  comm_.wait(comm_.all_reduce_sum(total));
}

std::string ZeroSchedule::why_pass_not_device_only() const {
  if (comm_.size() > 1) return cat(comm_.size(), " ranks: gradients are reduced during the pass");
  if (offload_) return "offload: gradients are copied to the host during the pass";
  if (!store_.whole_grads()) return "gradients are reduced from slots during the pass (stages 2-3)";
  if (store_.sharded_optimizer()) return "the forward waits for the weights' gather after the update (stages 1-3)";
  for (size_t unit = 0; unit < store_.unit_count(); ++unit)
    if (!store_.resident_params(unit)) return "weights are gathered into slots during the pass (stage 3)";
  return "";
}

void ZeroSchedule::publish_parameters() {
  // (Units the host optimizer updates send their weights out as each update finishes: send_up.)
  if (store_.sharded_optimizer()) {
    std::vector<size_t> whole_units;
    for (size_t unit = 0; unit < store_.unit_count(); ++unit)
      if (store_.trainable(unit) && store_.whole_params(unit) && !(offload_ && store_.optimizer_on_host(unit)))
        whole_units.push_back(unit);
    // Updates queued aside (pipelined): each unit's gather waits until a pass needs the unit (acquire_params),
    // so that no gather waits for an update the forward does not need yet.
    const bool aside = std::any_of(whole_units.begin(), whole_units.end(),
                                   [this](size_t unit) { return updated_aside_[unit] != nullptr; });
    if (aside) {
      for (size_t unit : whole_units) gather_pending_[unit] = true;
    } else {
      for_each_bucket(whole_units, config_.allgather_bucket_size,
                      [&](const std::vector<size_t>& b) { gather_units(b); });
    }
  }
  param_slots_.forget_contents();
}

OffloadTimes ZeroSchedule::take_offload_times() {
  const CopyTimes copies = comm_.take_copy_times();
  OffloadTimes out;
  out.to_host_ms = copies.to_host_ms, out.to_device_ms = copies.to_device_ms;
  out.to_host_bytes = copies.to_host_bytes, out.to_device_bytes = copies.to_device_bytes;
  if (offload_) out.update_wait_ms = offload_->take_wait_ms();
  return out;
}

StepCommStats ZeroSchedule::take_stats() {
  StepCommStats out = stats_;
  if (comm_.size() == 1) out = {};  // one rank's collectives are copies at most: nothing is sent
  for (const auto& [before, after] : waits_) out.exposed_ms += backend_.elapsed_ms(*before, *after);
  out.exposed_ms += host_comm_ms_;
  stats_ = {};
  waits_.clear();
  host_comm_ms_ = 0;
  return out;
}

}  // namespace zb
