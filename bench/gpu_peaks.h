// Dense bf16 tensor-core peaks (TFLOP/s, fp32 accumulation, no sparsity) by GPU name, from the vendors'
// datasheets: the denominator of MFU. Unknown GPUs have none; --peak-tflops supplies one.
#pragma once

#include <optional>
#include <string>

namespace zb {

std::optional<double> bf16_peak_tflops(const std::string& gpu_name);

}  // namespace zb
