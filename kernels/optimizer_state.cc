#include "kernels/optimizer_state.h"

#include "kernels/blockwise_quantization.h"

namespace zb {

namespace {

size_t line(size_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

size_t OptimizerStateFormat::moment_bytes(int64_t n, DType element) const {
  if (quantized) return 2 * line(size_t(n)) + 2 * line(size_t(quantization_blocks(n)) * sizeof(float));
  return line(size_t(n) * dtype_size(element)) * (second_moment ? 2 : 1);
}

double OptimizerStateFormat::moment_bytes_per_element() const {
  if (quantized) return 2.0 + 2.0 * sizeof(float) / double(kQuantizationBlock);
  return sizeof(float) * (second_moment ? 2.0 : 1.0);
}

MomentPointers moment_pointers(void* base, int64_t n, const OptimizerStateFormat& format, DType element) {
  char* bytes = static_cast<char*>(base);
  MomentPointers out;
  if (!format.quantized) {
    out.m = bytes;
    if (format.second_moment) out.v = bytes + line(size_t(n) * dtype_size(element));
    return out;
  }
  const size_t codes = line(size_t(n)), scales = line(size_t(quantization_blocks(n)) * sizeof(float));
  out.quantized.m_codes = reinterpret_cast<uint8_t*>(bytes);
  out.quantized.v_codes = reinterpret_cast<uint8_t*>(bytes + codes);
  out.quantized.m_scales = reinterpret_cast<float*>(bytes + 2 * codes);
  out.quantized.v_scales = reinterpret_cast<float*>(bytes + 2 * codes + scales);
  return out;
}

}  // namespace zb
