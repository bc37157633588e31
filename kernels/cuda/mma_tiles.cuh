// Warp-level bf16 matrix products on the tensor cores (mma.sync m16n8k16, fp32 accumulate) with operands
// loaded from shared memory by ldmatrix, and 16-byte cp.async tile copies. The fragment layouts are PTX's:
// for lane l, g = l / 4 and t = l % 4;
//   A (16 x 16, row-major):  a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16 x 8, "col"):       b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//   C (16 x 8, fp32):        c0, c1 = (g, 2t..2t+1), c2, c3 = (g+8, 2t..2t+1)
// so two adjacent C tiles of a 16 x 16 block, packed to bf16, are exactly an A fragment (FlashAttention-2's
// trick: probabilities go from one product into the next without leaving registers).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace zb::cuda::mma {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// A fragments of the 16 x (16 KC) block at (row0, col0) of a row-major tile with row stride ld (elements).
template <int KC>
__device__ __forceinline__ void load_a(uint32_t (&a)[KC][4], const bf16* tile, int ld, int row0, int col0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) ldmatrix_x4(a[kc], tile + (row0 + lane % 16) * ld + col0 + kc * 16 + (lane / 16) * 8);
}

// acc[n] (16 x 8 tiles, NT of them) += A (16 x 16 KC) * B, where B's column j is row n0 + j of `tile` (a
// [n][k] row-major tile: keys or queries by head dimension) and its k runs along that row from k0.
template <int KC, int NT>
__device__ __forceinline__ void mma_rows_as_columns(float (&acc)[NT][4], const uint32_t (&a)[KC][4], const bf16* tile,
                                                    int ld, int n0, int k0) {
  static_assert(NT % 2 == 0, "tiles come in pairs");
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, tile + (n0 + np * 16 + lane % 8 + (lane / 16) * 8) * ld + k0 + kc * 16 + ((lane / 8) % 2) * 8);
      mma_16816(acc[2 * np], a[kc], b[0], b[1]);
      mma_16816(acc[2 * np + 1], a[kc], b[2], b[3]);
    }
  }
}

// acc[n] += A (16 x 16 KC) * B, where B is the [k][n] row-major block of `tile` starting at row k0, column n0
// (e.g. V: keys by head dimension).
template <int KC, int NT>
__device__ __forceinline__ void mma_rows_as_rows(float (&acc)[NT][4], const uint32_t (&a)[KC][4], const bf16* tile,
                                                 int ld, int k0, int n0) {
  static_assert(NT % 2 == 0, "tiles come in pairs");
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, tile + (k0 + kc * 16 + lane % 8 + ((lane / 8) % 2) * 8) * ld + n0 + np * 16 + (lane / 16) * 8);
      mma_16816(acc[2 * np], a[kc], b[0], b[1]);
      mma_16816(acc[2 * np + 1], a[kc], b[2], b[3]);
    }
  }
}

// The A fragments (bf16) of the 16 x 16 KC block held as C tiles c[2 KC] (fp32).
template <int KC>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[KC][4], const float (&c)[2 * KC][4]) {
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
    a[kc][0] = pack_bf16(c[2 * kc][0], c[2 * kc][1]);
    a[kc][1] = pack_bf16(c[2 * kc][2], c[2 * kc][3]);
    a[kc][2] = pack_bf16(c[2 * kc + 1][0], c[2 * kc + 1][1]);
    a[kc][3] = pack_bf16(c[2 * kc + 1][2], c[2 * kc + 1][3]);
  }
}

template <int NT>
__device__ __forceinline__ void zero(float (&c)[NT][4]) {
#pragma unroll
  for (int i = 0; i < NT; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
}

// 16 bytes global -> shared, asynchronously; zero-filled when `valid` is false.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace zb::cuda::mma
