// Which CUDA devices this process can use. Safe to call where no driver or no GPU exists.
#pragma once

#include <cstddef>
#include <string>

namespace zb {

// The number of CUDA devices visible; 0 where there is no driver or no GPU.
int cuda_device_count();
// The device's name as the driver reports it ("NVIDIA H200"); empty when it does not exist.
std::string cuda_device_name(int ordinal);
// The device's total memory in bytes (0 when it does not exist).
size_t cuda_device_memory_bytes(int ordinal);
// The device's PCI bus id ("0000:18:00.0"), which names the same GPU to NVML whatever CUDA_VISIBLE_DEVICES
// says; empty when it does not exist.
std::string cuda_device_pci_bus_id(int ordinal);
// "13.0" style versions of the CUDA driver the system has and the runtime this program was built with
// (empty where there is no driver).
std::string cuda_driver_version();
std::string cuda_runtime_version();

}  // namespace zb
