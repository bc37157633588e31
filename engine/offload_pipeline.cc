#include "engine/offload_pipeline.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace zb {

OffloadPipeline::OffloadPipeline(HostOptimizer& host, const ParameterStore& store, Communicator& comm,
                                 std::vector<size_t> forward_order, Schedule schedule)
    : host_(host),
      store_(store),
      comm_(comm),
      forward_order_(std::move(forward_order)),
      schedule_(std::move(schedule)),
      awaiting_update_(store.unit_count(), false),
      not_yet_asked_(store.unit_count(), false) {}

void OffloadPipeline::gradient_final(size_t unit) {
  if (!store_.optimizer_on_host(unit)) return;
  Tensor host_buffer = host_.gradient_buffer(unit);
  last_to_host_ = schedule_.issue([&] { return comm_.copy(store_.optimizer_grad(unit), host_buffer); });
  // The host may update the unit as soon as the copy lands, while backward goes on.
  if (std::function<void()> landed = host_.landing_signal(unit)) comm_.after_issued(std::move(landed));
}

void OffloadPipeline::start_update(const OptimizerParams& params) {
  comm_.host_wait(last_to_host_);
  last_to_host_ = 0;
  std::vector<size_t> order;
  for (size_t unit : forward_order_) {
    awaiting_update_[unit] = not_yet_asked_[unit] = store_.optimizer_on_host(unit);
    if (awaiting_update_[unit]) order.push_back(unit);
  }
  host_.start_step(params, order);
}

void OffloadPipeline::ensure_updated(size_t unit) {
  not_yet_asked_[unit] = false;
  hand_over(unit);
}

void OffloadPipeline::hand_over(size_t unit) {
  if (!awaiting_update_[unit]) return;
  if (!host_.unit_done(unit)) upload_finished_units(unit);
  const auto start = std::chrono::steady_clock::now();
  host_.wait_unit(unit);
  wait_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  awaiting_update_[unit] = false;
  if (store_.params_on_host()) return;  // updated in place, on the host: the next gather brings them up
  schedule_.send_up(unit, host_.updated_weights(unit));
}

// While training waits for the host to finish `waiting_for`, the copy engine would idle: finished units later
// in the forward (the ones updated speculatively during backward) go up meanwhile, up to waiting_for's size.
// Such a copy (2 bytes a parameter over PCIe) is shorter than the CPU's update of as many parameters (28-32
// bytes a parameter through host memory), so it is done before waiting_for's own copy is issued. Without this, the last
// units of the forward went up one by one as the forward reached them, each copy on the critical path.
void OffloadPipeline::upload_finished_units(size_t waiting_for) {
  if (store_.params_on_host()) return;  // nothing goes up before its gather
  int64_t budget = store_.padded_numel(waiting_for);
  auto it = std::find(forward_order_.begin(), forward_order_.end(), waiting_for);
  if (it == forward_order_.end()) return;
  for (++it; it != forward_order_.end() && budget > 0; ++it) {
    const size_t next = *it;
    if (!awaiting_update_[next] || !host_.unit_done(next)) continue;
    // Its upload would gather it from the other ranks: collectives stay in the forward's order on every rank.
    if (upload_gathers(store_, comm_, next)) return;
    budget -= store_.padded_numel(next);
    hand_over(next);
  }
}

double OffloadPipeline::take_wait_ms() {
  return std::exchange(wait_ms_, 0.0);
}

}  // namespace zb
