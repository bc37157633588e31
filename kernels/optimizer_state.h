// The optimizer's state beside each element's fp32 master weight, and how a range's moments lie in memory:
// one format for the device's store, the host optimizer's memory and its NVMe file.
//
//   fp32 moments:  [m: n values][v: n values]                  (SGD: m only; values of the master's dtype)
//   8-bit moments: [m codes: n][v codes: n][m scales][v scales]  (one fp32 scale a kQuantizationBlock)
//
// Each part starts on a multiple of 64 bytes (a cache line; every vector load of the CPU optimizer and the
// GPU's 16-byte loads stay aligned where n is a multiple of 64).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/adam_8bit.h"
#include "kernels/optimizer_params.h"

namespace zb {

struct OptimizerStateFormat {
  bool second_moment = true;  // Adam and AdamW keep v; SGD keeps only its momentum, m
  bool quantized = false;     // Adam's m and v as 8-bit codes with a scale a block (OptimizerParams::moments_8bit)

  static OptimizerStateFormat of(const OptimizerParams& params) {
    return {params.kind != OptimizerKind::sgd, params.moments_8bit};
  }
  // Bytes of the moments of a range of n elements; `element` is the master's dtype (fp32, or fp64 in the
  // CPU reference's fp64 models), the fp32 moments' too.
  size_t moment_bytes(int64_t n, DType element = DType::f32) const;
  // Bytes a parameter of the moments, for memory models: 8 (fp32 m and v), 4 (SGD), 2 + 8/2048 (8-bit).
  double moment_bytes_per_element() const;
};

// Where the parts of a moments buffer of moment_bytes(n, element) bytes at `base` are: m and v (fp32; v null
// for SGD), or the codes and scales (quantized; the seed and first element left for the caller to set).
struct MomentPointers {
  void* m = nullptr;
  void* v = nullptr;
  QuantizedMoments quantized;
};
MomentPointers moment_pointers(void* base, int64_t n, const OptimizerStateFormat& format,
                               DType element = DType::f32);

// Stochastic rounding's element numbers of 8-bit moments: element `begin` of unit u (its place in the
// unit) is element unit_element(u, begin) of the run, the same on every rank and stage. A multiple of 4 where
// begin is (units hold fewer than 2^40 elements).
inline uint64_t unit_element(size_t u, int64_t begin) { return (uint64_t(u) << 40) + uint64_t(begin); }

}  // namespace zb
