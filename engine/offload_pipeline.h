// OffloadPipeline: the offload strategies' traffic with the host optimizer (engine/host_optimizer.h), unit by
// unit. As backward finishes a unit's gradient (its optimizer range), the gradient goes down to the host, which
// may start on the unit as soon as it lands. Once the step's update has started on the host, the schedule
// asks for each unit before anything reads its weights (ensure_updated): the pipeline waits for the host's
// update of that unit, sending up meanwhile the later units the host has finished, and hands the new weights to
// the schedule, which queues them up (and gathers them where the stage holds them whole). ZeroSchedule decides
// when; the pipeline knows what the host has done. Units whose optimizer state stays on the device (an offload
// ratio below 1) are not the pipeline's: it passes them by.
#pragma once

#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "engine/host_optimizer.h"
#include "engine/parameter_store.h"

namespace zb {

// Whether a unit's new weights, coming up from the host, end in an all-gather: the unit is held whole but
// updated as a shard, on several ranks.
inline bool upload_gathers(const ParameterStore& store, const Communicator& comm, size_t unit) {
  return store.resident_params(unit) && store.sharded_optimizer() && comm.size() > 1;
}

class OffloadPipeline {
 public:
  // What the pipeline asks of the schedule that owns it.
  struct Schedule {
    // Runs a copy or collective through the schedule (so that its ticket and host time are counted).
    std::function<CommTicket(const std::function<CommTicket()>&)> issue;
    // Queues the unit's new weights (host memory, the unit's optimizer range) up to where the device holds them.
    std::function<void(size_t unit, const Tensor& updated_weights)> send_up;
  };

  // forward_order: the units in the order the forward reads them (the host updates them so).
  OffloadPipeline(HostOptimizer& host, const ParameterStore& store, Communicator& comm,
                  std::vector<size_t> forward_order, Schedule schedule);

  // The unit's gradient is final (after the work issued so far): it goes down, if the host updates the unit.
  void gradient_final(size_t unit);
  // After the step's gradients: waits for their copies to land, then starts the host's update of every unit it
  // holds, in forward order.
  void start_update(const OptimizerParams& params);
  // Waits for the host's update of the unit, if one is under way, and hands its new weights to the schedule.
  void ensure_updated(size_t unit);
  // Whether the schedule has not yet asked for the unit's new weights this step (ensure_updated): the same on
  // every rank, unlike whether the host is done with the unit, so that what a rank does on it (a prefetch
  // stops there: it must not wait for the CPU) keeps the ranks' collectives alike.
  bool not_yet_asked(size_t unit) const { return not_yet_asked_[unit]; }
  // The host time spent waiting for updates since the last call, ms.
  double take_wait_ms();

 private:
  // Waits for the unit's update, if the weights are not handed over yet, and hands them over.
  void hand_over(size_t unit);
  // While waiting for one unit's update, sends up finished later ones (see the definition).
  void upload_finished_units(size_t waiting_for);

  HostOptimizer& host_;
  const ParameterStore& store_;
  Communicator& comm_;
  std::vector<size_t> forward_order_;
  Schedule schedule_;
  std::vector<bool> awaiting_update_;  // units whose new weights the host has not handed over yet
  std::vector<bool> not_yet_asked_;    // units the host updates this step that the schedule has not asked for
  CommTicket last_to_host_ = 0;
  double wait_ms_ = 0;
};

}  // namespace zb
