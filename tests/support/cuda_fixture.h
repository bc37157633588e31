// A test fixture for comparing the CUDA backend with the CPU reference: device tensors made from host values
// (in fp32 or bf16), poisoned outputs, downloads, and the tolerance of each dtype. Skips where no GPU exists.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/sixteen_bit.h"
#include "core/cuda_devices.h"
#include "core/cuda_memory.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "support/random_inputs.h"
#include "support/tensor_views.h"

namespace zb::test {

class CudaFixture {
 protected:
  // Call first in SetUp; returns false (after GTEST_SKIP) where there is no GPU.
  bool start() {
    if (cuda_device_count() == 0) return false;
    allocator = std::make_unique<TrackingAllocator>(std::make_unique<DeviceMemory>(0));
    gpu = std::make_unique<CudaBackend>(0, *allocator, BackendOptions::from_environment());
    return true;
  }

  // Another value of one backend option for what follows.
  template <typename Choice>
  void use(Choice BackendOptions::*member, Choice value) {
    BackendOptions options = gpu->options();
    options.*member = value;
    gpu->set_options(options);
  }

  // The values a tensor of `dtype` holds for `host` (bf16 and fp16 round them).
  static std::vector<float> representable(std::vector<float> host, DType dtype) {
    if (dtype == DType::bf16)
      for (float& x : host) x = round_to_bf16(x);
    if (dtype == DType::f16)
      for (float& x : host) x = round_to_f16(x);
    return host;
  }

  Tensor upload(const std::vector<float>& host, Shape shape, DType dtype) {
    EXPECT_EQ(int64_t(host.size()), shape.numel());
    buffers.push_back(allocator->allocate(shape, dtype, MemoryPool::workspace));
    Tensor t = buffers.back().view(shape, dtype);
    if (dtype == DType::bf16 || dtype == DType::f16) {
      const auto round = sixteen_bit_conversions(dtype).from_float;
      std::vector<uint16_t> bits(host.size());
      for (size_t i = 0; i < host.size(); ++i) bits[i] = round(host[i]);
      gpu->copy(Tensor(bits.data(), shape, dtype, Device::cpu()), t);
    } else {
      gpu->copy(Tensor(const_cast<float*>(host.data()), shape, dtype, Device::cpu()), t);
    }
    return t;
  }

  Tensor upload_ids(const std::vector<int32_t>& ids) {
    buffers.push_back(allocator->allocate(Shape{int64_t(ids.size())}, DType::i32, MemoryPool::workspace));
    Tensor t = buffers.back().view(Shape{int64_t(ids.size())}, DType::i32);
    gpu->copy(view(ids), t);
    return t;
  }

  // An output tensor full of NaN: every element the op fails to write shows up as NaN.
  Tensor poisoned(Shape shape, DType dtype) {
    return upload(std::vector<float>(shape.numel(), std::numeric_limits<float>::quiet_NaN()), shape, dtype);
  }

  // A one-element fp64 tensor on the GPU holding value, and its value read back.
  Tensor upload_scalar(double value) {
    buffers.push_back(allocator->allocate(Shape{1}, DType::f64, MemoryPool::workspace));
    Tensor t = buffers.back().view(Shape{1}, DType::f64);
    gpu->copy(Tensor(&value, Shape{1}, DType::f64, Device::cpu()), t);
    return t;
  }
  double download_scalar(const Tensor& t) {
    double value = 0;
    Tensor h(&value, Shape{1}, DType::f64, Device::cpu());
    gpu->copy(t, h);
    return value;
  }

  std::vector<float> download(const Tensor& t) {
    std::vector<float> host(t.numel());
    if (t.dtype == DType::bf16 || t.dtype == DType::f16) {
      const auto widen = sixteen_bit_conversions(t.dtype).to_float;
      std::vector<uint16_t> bits(t.numel());
      Tensor h(bits.data(), t.shape, t.dtype, Device::cpu());
      gpu->copy(t, h);
      for (size_t i = 0; i < bits.size(); ++i) host[i] = widen(bits[i]);
    } else {
      Tensor h(host.data(), t.shape, t.dtype, Device::cpu());
      gpu->copy(t, h);
    }
    return host;
  }

  // fp16 keeps 3 more bits than bf16: a quarter of bf16's bound leaves a factor of 2 for the sums.
  static double tolerance(DType dtype) { return dtype == DType::f32 ? 1e-5 : dtype == DType::f16 ? 5e-3 : 2e-2; }

  std::unique_ptr<TrackingAllocator> allocator;
  std::unique_ptr<CudaBackend> gpu;
  CpuBackend cpu;
  std::vector<Buffer> buffers;
};

}  // namespace zb::test
