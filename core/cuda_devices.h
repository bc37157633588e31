// Which CUDA devices this process can use. Safe to call where no driver or no GPU exists.
#pragma once

#include <string>

namespace zb {

// The number of CUDA devices visible; 0 where there is no driver or no GPU.
int cuda_device_count();
// The device's name as the driver reports it ("NVIDIA H200"); empty when it does not exist.
std::string cuda_device_name(int ordinal);

}  // namespace zb
