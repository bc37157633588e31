// Causal attention launchers: the tensor-core flash kernels for bf16 with head size 64 or 128, the simple
// CUDA-core kernels otherwise (fp32 and fp16, other head sizes; fp16 runs cuDNN's fused attention by default).
#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention_simple.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/flash_attention.cuh"

namespace zb::cuda {

namespace {

constexpr int kSimpleWarpsPerBlock = 4;

// Raises a flash kernel's dynamic shared-memory limit, after checking that this GPU offers that much per block, and
// asks for the largest shared-memory carveout: left to the driver, it chose 135 KB on an H200 (ncu), room for
// two blocks of 56 KB where registers allow three. The kernels' copies bypass L1 (cp.async.cg).
template <typename Kernel>
void configure_flash_kernel(Kernel kernel, size_t bytes) {
  const size_t limit = max_shared_memory_per_block();
  ZB_CHECK(bytes <= limit, "the flash-attention kernels need ", bytes, " bytes of shared memory per block; this ",
           "GPU offers ", limit, " (head size 128 in bf16 needs a Hopper- or A100-class GPU for now)");
  allow_dynamic_shared_memory(kernel, bytes);
  ZB_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, int(cudaSharedmemCarveoutMaxShared)));
}

// The flash kernels put (batch, head) pairs on the grid's y axis and load 16-byte vectors.
void check_flash_launch(const AttentionShape& s, const void* a, const void* b) {
  ZB_CHECK(s.batch * s.heads <= 65535, "flash attention handles at most 65535 (batch x heads), got ",
           s.batch * s.heads);
  ZB_CHECK(reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0,
           "flash attention needs 16-byte aligned tensors");
}

template <int D>
void flash_forward(const bf16* qkv, const AttentionShape& s, bf16* out, float* lse, float scale, cudaStream_t stream) {
  check_flash_launch(s, qkv, out);
  static const bool configured = (configure_flash_kernel(flash::forward_kernel<D>, flash::forward_smem<D>()), true);
  (void)configured;
  const dim3 grid(unsigned((s.seq + flash::kRows - 1) / flash::kRows), unsigned(s.batch * s.heads));
  flash::forward_kernel<D><<<grid, flash::kThreads, flash::forward_smem<D>(), stream>>>(qkv, s, out, lse, scale);
  ZB_CUDA_CHECK_LAUNCH();
}

template <int D>
void flash_backward(const bf16* dout, const bf16* qkv, const float* lse, const float* delta, const AttentionShape& s,
                    bf16* dqkv, float scale, cudaStream_t stream) {
  check_flash_launch(s, qkv, dqkv);
  check_flash_launch(s, dout, qkv);
  static const bool configured = (configure_flash_kernel(flash::dkdv_kernel<D>, flash::dkdv_smem<D>()),
                                  configure_flash_kernel(flash::dq_kernel<D>, flash::dq_smem<D>()), true);
  (void)configured;
  const unsigned blocks = unsigned((s.seq + flash::kRows - 1) / flash::kRows);
  flash::dkdv_kernel<D><<<dim3(blocks, unsigned(s.batch * s.kv_heads)), flash::kThreads, flash::dkdv_smem<D>(),
                          stream>>>(dout, qkv, lse, delta, s, dqkv, scale);
  ZB_CUDA_CHECK_LAUNCH();
  flash::dq_kernel<D><<<dim3(blocks, unsigned(s.batch * s.heads)), flash::kThreads, flash::dq_smem<D>(),
                        stream>>>(dout, qkv, lse, delta, s, dqkv, scale);
  ZB_CUDA_CHECK_LAUNCH();
}

template <typename T>
constexpr bool kFlashSupported = std::is_same_v<T, bf16>;


unsigned simple_blocks(int64_t rows) { return blocks_for(rows, kSimpleWarpsPerBlock); }

}  // namespace

template <typename T>
void attention_forward(const T* qkv, const AttentionShape& s, T* out, float* lse, cudaStream_t stream) {
  const float scale = float(s.scores_scale());
  if constexpr (kFlashSupported<T>) {
    if (s.head_dim == 64) return flash_forward<64>(qkv, s, out, lse, scale, stream);
    if (s.head_dim == 128) return flash_forward<128>(qkv, s, out, lse, scale, stream);
  }
  ZB_CHECK(s.head_dim <= 32 * kSimpleMaxDimPerLane, "head_dim ", s.head_dim, " above ", 32 * kSimpleMaxDimPerLane);
  simple_attention_forward_kernel<<<simple_blocks(s.batch * s.heads * s.seq), kSimpleWarpsPerBlock * 32, 0, stream>>>(
      qkv, s, out, lse, scale);
  ZB_CUDA_CHECK_LAUNCH();
}

size_t attention_backward_scratch(const AttentionShape& s) { return size_t(s.batch * s.heads * s.seq) * sizeof(float); }

template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* out, const float* lse, const AttentionShape& s, T* dqkv,
                        Scratch scratch, cudaStream_t stream) {
  ZB_CHECK(scratch.bytes >= attention_backward_scratch(s), "attention_backward scratch too small");
  const float scale = float(s.scores_scale());
  auto* delta = static_cast<float*>(scratch.data);
  const int64_t rows = s.batch * s.heads * s.seq;
  attention_delta_kernel<<<simple_blocks(rows), kSimpleWarpsPerBlock * 32, 0, stream>>>(dout, out, s, delta);
  ZB_CUDA_CHECK_LAUNCH();
  if constexpr (kFlashSupported<T>) {
    if (s.head_dim == 64) return flash_backward<64>(dout, qkv, lse, delta, s, dqkv, scale, stream);
    if (s.head_dim == 128) return flash_backward<128>(dout, qkv, lse, delta, s, dqkv, scale, stream);
  }
  ZB_CHECK(s.head_dim <= 32 * kSimpleMaxDimPerLane, "head_dim ", s.head_dim, " above ", 32 * kSimpleMaxDimPerLane);
  simple_attention_dq_kernel<<<simple_blocks(rows), kSimpleWarpsPerBlock * 32, 0, stream>>>(dout, qkv, lse, delta, s,
                                                                                            dqkv, scale);
  ZB_CUDA_CHECK_LAUNCH();
  simple_attention_dkdv_kernel<<<simple_blocks(s.batch * s.kv_heads * s.seq), kSimpleWarpsPerBlock * 32, 0, stream>>>(
      dout, qkv, lse, delta, s, dqkv, scale);
  ZB_CUDA_CHECK_LAUNCH();
}

namespace {

// One thread per element of a key (value) head: the sum, in fp32, of its group's query-head gradients.
template <typename T>
__global__ void sum_head_groups_kernel(const T* full, AttentionShape s, T* dst) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.tokens() * s.kv_width()) return;
  const int64_t token = i / s.kv_width(), g = i % s.kv_width() / s.head_dim, e = i % s.head_dim;
  const T* group = full + token * s.q_width() + g * s.group_size() * s.head_dim + e;
  float sum = 0.0f;
  for (int64_t h = 0; h < s.group_size(); ++h) sum += to_float(group[h * s.head_dim]);
  dst[token * s.qkv_width() + g * s.head_dim + e] = from_float<T>(sum);
}

}  // namespace

template <typename T>
void sum_head_groups(const T* full, const AttentionShape& s, T* dst, cudaStream_t stream) {
  sum_head_groups_kernel<T><<<blocks_for(s.tokens() * s.kv_width(), 256), 256, 0, stream>>>(full, s, dst);
  ZB_CUDA_CHECK_LAUNCH();
}

template void attention_forward<float>(const float*, const AttentionShape&, float*, float*, cudaStream_t);
template void attention_forward<bf16>(const bf16*, const AttentionShape&, bf16*, float*, cudaStream_t);
template void attention_backward<float>(const float*, const float*, const float*, const float*, const AttentionShape&,
                                        float*, Scratch, cudaStream_t);
template void attention_backward<bf16>(const bf16*, const bf16*, const bf16*, const float*, const AttentionShape&,
                                       bf16*, Scratch, cudaStream_t);
template void attention_forward<f16>(const f16*, const AttentionShape&, f16*, float*, cudaStream_t);
template void attention_backward<f16>(const f16*, const f16*, const f16*, const float*, const AttentionShape&, f16*,
                                      Scratch, cudaStream_t);
template void sum_head_groups<bf16>(const bf16*, const AttentionShape&, bf16*, cudaStream_t);
template void sum_head_groups<f16>(const f16*, const AttentionShape&, f16*, cudaStream_t);

}  // namespace zb::cuda
