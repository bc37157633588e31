// The CUDA-facing parts of core in a build without the CUDA toolkit (ZB_WITH_CUDA off): no device is ever
// visible, so the programs refuse --device cuda before any work, and nothing below is reached through them.
#include "core/cuda_devices.h"
#include "core/cuda_memory.h"
#include "core/errors.h"

namespace zb {

int cuda_device_count() {
  return 0;
}
std::string cuda_device_name(int) {
  return {};
}
size_t cuda_device_memory_bytes(int) {
  return 0;
}
std::string cuda_device_pci_bus_id(int) {
  return {};
}
std::string cuda_driver_version() {
  return {};
}
std::string cuda_runtime_version() {
  return {};
}

void* DeviceMemory::allocate(size_t) {
  throw Error("this build has no CUDA support (the toolkit was not found)");
}
void DeviceMemory::release(void*) noexcept {}
std::string DeviceMemory::availability(size_t) const {
  return {};
}
size_t DeviceMemory::footprint(size_t bytes) const {
  return bytes;
}
size_t DeviceMemory::held_outside(size_t) const {
  return 0;
}
void* PinnedHostMemory::allocate(size_t) {
  throw Error("this build has no CUDA support (the toolkit was not found)");
}
void PinnedHostMemory::release(void*) noexcept {}

}  // namespace zb
