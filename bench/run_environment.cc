#include "bench/run_environment.h"

#include <cstdlib>
#include <ctime>

#include "comm/nccl_communicator.h"
#include "core/cuda_devices.h"
#include "git_commit.h"  // generated at build time: ZB_GIT_COMMIT

namespace zb {

namespace {

std::string environment_variable(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

std::optional<double> device_capacity_gb(const Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  return double(cuda_device_memory_bytes(device.index)) / 1e9;
}

std::string utc_now(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[64];
  std::strftime(text, sizeof text, format, &utc);
  return text;
}

RunEnvironment describe_environment(const MpiWorld& world, Device device, const BackendOptions& backend_options) {
  RunEnvironment e;
  e.gpu_name = device.is_cuda() ? cuda_device_name(device.index) : "CPU";
  e.gpu_count = device.is_cuda() ? world.size() : 0;
  e.driver_version = cuda_driver_version();
  e.cuda_version = cuda_runtime_version();
  e.nccl_version = nccl_library_version();
  e.mpi_version = world.mpi_version();
  e.host_name = world.host_name();
  e.machine_name = environment_variable("MACHINE_NAME");
  e.cloud_provider = environment_variable("CLOUD_PROVIDER");
  e.git_commit = ZB_GIT_COMMIT;
  e.timestamp = utc_now("%Y-%m-%dT%H:%M:%SZ");
  if (device.is_cuda()) e.backend_options = backend_options.summary();
  return e;
}

}  // namespace zb
