// The environment a comparison ran in, for its records: GPU, driver, CUDA, NCCL and MPI versions, host,
// MACHINE_NAME and CLOUD_PROVIDER from the environment, the build's git commit, the backend's options and the
// time.
#pragma once

#include <optional>
#include <string>

#include "bench/bench_record.h"
#include "comm/mpi_world.h"
#include "core/device.h"
#include "kernels/backend_options.h"

namespace zb {

RunEnvironment describe_environment(const MpiWorld& world, Device device, const BackendOptions& backend_options);
// The GPU's memory in GB (1e9 bytes), as the driver reports it; none on the CPU backend.
std::optional<double> device_capacity_gb(const Device& device);
// The current time in UTC, formatted by strftime.
std::string utc_now(const char* format);

}  // namespace zb
