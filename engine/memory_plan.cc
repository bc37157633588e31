#include "engine/memory_plan.h"

#include <algorithm>

#include "comm/dry_run_communicator.h"
#include "engine/host_optimizer.h"
#include "engine/parameter_store.h"
#include "engine/zero_schedule.h"
#include "kernels/dry_run_backend.h"
#include "models/transformer.h"

namespace zb {

MemoryPlan plan_memory(const TrainingOptions& options, int rank, int world, size_t backend_workspace_bytes) {
  validate(options.zero);
  validate_offload_ratio(options.offload_ratio, options.offload);
  DryRunBackend backend;
  DryRunCommunicator comm(rank, world);
  TrackingAllocator device(std::make_unique<CountingMemory>());
  TrackingAllocator host(std::make_unique<CountingMemory>());
  const ParameterLayout layout(options.model);
  const ShardGeometry geometry = shard_geometry(options, rank, world);
  const OptimizerStateFormat state = OptimizerStateFormat::of(options.optimizer);

  // In the Trainer's order: the store, the model, the schedule, then the weights' initialization.
  ParameterStore store(layout, device, options.dtype, state, geometry, &host);
  Transformer model(layout, backend, device, options.dtype, options.batch, options.seq,
                    options.activation_checkpointing);
  ZeroSchedule schedule(store, model, backend, comm, device, options.zero);
  Buffer backend_workspace;
  if (backend_workspace_bytes > 0) backend_workspace = device.allocate(backend_workspace_bytes, MemoryPool::workspace);
  // (Weights held on the host are drawn there: no device staging.)
  if (!geometry.params_on_host) store.initialize(backend, options.seed);
  MemoryPlan plan;
  plan.initializing = device.total().peak;
  for (MemoryPool pool : kAllMemoryPools) plan.pool_peak[size_t(pool)] = device.usage(pool).peak;

  device.reset_peaks();
  StepBuffers buffers = allocate_step_buffers(device, options);
  const Shape ids{options.batch * options.seq};
  const Tensor inputs = buffers.inputs.view(ids, DType::i32), targets = buffers.targets.view(ids, DType::i32);
  // The host optimizer of the offload strategies moves data but allocates nothing on the device: the schedule
  // runs without it. (It would only stop stage 3's prefetch at units the forward has not yet asked the host for:
  // fewer slots.)
  for (int step = 0; step < 2; ++step) {
    for (int64_t micro = 0; micro < options.grad_accum; ++micro) {
      schedule.begin_micro_batch(micro, options.grad_accum);
      model.queue_forward_and_loss(inputs, targets, 1.0f);
      model.queue_backward(inputs);
      schedule.end_micro_batch();
    }
    schedule.finish_gradients();
    schedule.update_on_device([](size_t) {});
    schedule.publish_parameters();
  }
  plan.training = device.total().peak;
  plan.peak = std::max(plan.initializing, plan.training);
  for (MemoryPool pool : kAllMemoryPools) {
    plan.pool_peak[size_t(pool)] = std::max(plan.pool_peak[size_t(pool)], device.usage(pool).peak);
  }
  if (options.offload != OffloadStrategy::none) {
    plan.host_bytes = HostOptimizer::host_bytes(layout, options.dtype, geometry, state,
                                                options.offload == OffloadStrategy::nvme);
  }
  return plan;
}

}  // namespace zb
