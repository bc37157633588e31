// The optimizer's state of a Trainer as host bytes, and a NaN planted in its weights: how a test checks that
// a step that failed left everything as it was.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/trainer.h"

namespace zb::test {

inline std::vector<uint8_t> host_bytes(Backend& backend, const Tensor& t) {
  std::vector<uint8_t> bytes(t.bytes());
  Tensor host(bytes.data(), t.shape, t.dtype, Device::cpu());
  if (t.bytes()) backend.copy(t, host);
  return bytes;
}

// Every unit's master weights, moments and model weights, in that order (a frozen unit's weights alone).
inline std::vector<std::vector<uint8_t>> optimizer_state(Backend& backend, const ParameterStore& store) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t u = 0; u < store.unit_count(); ++u) {
    if (!store.trainable(u)) {
      out.push_back(host_bytes(backend, store.params(u)));
      continue;
    }
    for (const Tensor& t : {store.master(u), store.first_moment(u), store.second_moment(u), store.params(u)})
      out.push_back(host_bytes(backend, t));
  }
  return out;
}

// Makes the first model weight of the first unit NaN, so that the next forward's loss is NaN.
inline void plant_nan_weight(Backend& backend, const ParameterStore& store) {
  Tensor params = store.params(0);
  std::vector<uint8_t> bytes = host_bytes(backend, params);
  if (params.dtype == DType::bf16) {
    const uint16_t nan_bits = 0x7fc0;
    std::memcpy(bytes.data(), &nan_bits, sizeof nan_bits);
  } else if (params.dtype == DType::f64) {
    const double nan = std::nan("");
    std::memcpy(bytes.data(), &nan, sizeof nan);
  } else {
    const float nan = std::nanf("");
    std::memcpy(bytes.data(), &nan, sizeof nan);
  }
  backend.copy(Tensor(bytes.data(), params.shape, params.dtype, Device::cpu()), params);
}

}  // namespace zb::test
