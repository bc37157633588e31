// Flash attention for bf16 with head sizes 64 and 128, on the tensor cores (WMMA 16x16x16, fp32 accumulate).
// Blocks of 64 queries (forward, dQ) or 64 keys (dK/dV); 4 warps, each owning 16 rows. Scores and
// probabilities pass through shared memory between the matrix products; the softmax runs two lanes per row.
//
// Forward keeps the output in registers and rescales it online (FlashAttention-2). The backward is two
// kernels so that nothing needs atomics: dK/dV per key block (looping over the query blocks and the group's
// query heads), and dQ per query block (looping over key blocks). Both rebuild P from the saved log-sum-exp.
#pragma once

#include <mma.h>

#include "kernels/attention_shape.h"
#include "kernels/cuda/cuda_common.cuh"

namespace zb::cuda::flash {

using namespace nvcuda;

constexpr int kRows = 64;         // queries or keys per block
constexpr int kWarps = 4;         // each warp owns 16 rows
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct Layout {
  static constexpr int kTileLd = D + 8;                    // bf16 tile row stride (padding staggers the banks)
  static constexpr int kScoreLd = (D > 64 ? D : 64) + 4;   // fp32 per-warp scratch row stride
  static constexpr int kProbLd = 64 + 8;                   // bf16 per-warp probability row stride
  static constexpr int kTileElems = kRows * kTileLd;
  static constexpr int kScoreElems = 16 * kScoreLd;
  static constexpr int kProbElems = 16 * kProbLd;
};

// Hands out consecutive pieces of dynamic shared memory (each piece's size keeps 32-byte alignment).
struct SmemCursor {
  char* next;
  template <typename T>
  __device__ T* take(int elements) {
    T* p = reinterpret_cast<T*>(next);
    next += elements * sizeof(T);
    return p;
  }
};

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Copies rows [first, first + 64) of the head at `offset` (elements from each token row's start) into a
// [64][D] shared tile, zero past the sequence's end. 16-byte vectors.
template <int D>
__device__ void load_tile(bf16* tile, const bf16* base, int64_t row_stride, int64_t first, int64_t seq) {
  constexpr int kVecsPerRow = D / 8;
  for (int i = threadIdx.x; i < kRows * kVecsPerRow; i += kThreads) {
    const int r = i / kVecsPerRow, c = (i % kVecsPerRow) * 8;
    Vec16<bf16> v;
    if (first + r < seq) {
      v = load16(base + (first + r) * row_stride + c);
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) v.v[k] = __float2bfloat16(0.0f);
    }
    store16(tile + r * Layout<D>::kTileLd + c, v);
  }
}

// out[16 x 64] (fp32, row stride ld_out) = A[16 x D] * B^T where B is a [64][D] tile (rows of B are columns).
template <int D>
__device__ void product_abt(const bf16* a, const bf16* b_tile, float* out, int ld_out) {
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      FragA fa;
      FragBCol fb;
      wmma::load_matrix_sync(fa, a + k * 16, Layout<D>::kTileLd);
      wmma::load_matrix_sync(fb, b_tile + n * 16 * Layout<D>::kTileLd + k * 16, Layout<D>::kTileLd);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, ld_out, wmma::mem_row_major);
  }
}

// acc[n] += P[16 x 64] (bf16, row stride kProbLd) * B[64 x D] (a [64][D] tile), for the D/16 column blocks n.
template <int D>
__device__ void accumulate_pb(FragAcc (&acc)[D / 16], const bf16* p, const bf16* b_tile) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    FragA fa;
    wmma::load_matrix_sync(fa, p + k * 16, Layout<D>::kProbLd);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      FragBRow fb;
      wmma::load_matrix_sync(fb, b_tile + k * 16 * Layout<D>::kTileLd + n * 16, Layout<D>::kTileLd);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes a warp's 16 x D accumulator, times `scale`, to global rows (row_stride apart) through fp32 scratch.
template <int D>
__device__ void store_rows(FragAcc (&acc)[D / 16], float* scratch, float scale, bf16* dst, int64_t row_stride,
                           int64_t first_row, int64_t seq) {
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(scratch + n * 16, acc[n], Layout<D>::kScoreLd, wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int i = lane; i < 16 * D / 8; i += 32) {
    const int r = i / (D / 8), c = (i % (D / 8)) * 8;
    if (first_row + r >= seq) continue;
    Vec16<bf16> v;
#pragma unroll
    for (int k = 0; k < 8; ++k) v.v[k] = __float2bfloat16(scratch[r * Layout<D>::kScoreLd + c + k] * scale);
    store16(dst + (first_row + r) * row_stride + c, v);
  }
  __syncwarp();
}

template <int D>
constexpr size_t forward_smem() {
  using L = Layout<D>;
  return 3 * L::kTileElems * sizeof(bf16) + kWarps * (L::kScoreElems * sizeof(float) + L::kProbElems * sizeof(bf16));
}

template <int D>
__global__ void __launch_bounds__(kThreads) forward_kernel(const bf16* qkv, AttentionShape s, bf16* out, float* lse,
                                                            float scale) {
  using L = Layout<D>;
  extern __shared__ __align__(128) char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  SmemCursor cursor{smem};
  bf16* q_tile = cursor.take<bf16>(L::kTileElems);
  bf16* k_tile = cursor.take<bf16>(L::kTileElems);
  bf16* v_tile = cursor.take<bf16>(L::kTileElems);
  float* scores = cursor.take<float>(kWarps * L::kScoreElems) + warp * L::kScoreElems;
  bf16* probs = cursor.take<bf16>(kWarps * L::kProbElems) + warp * L::kProbElems;

  const int64_t q_block = gridDim.x - 1 - blockIdx.x;  // the longest (latest) query blocks start first
  const int64_t b = blockIdx.y / s.heads, h = blockIdx.y % s.heads, kvh = h / s.group_size();
  const int64_t stride = s.qkv_width();
  const bf16* batch_base = qkv + b * s.seq * stride;
  load_tile<D>(q_tile, batch_base + h * D, stride, q_block * kRows, s.seq);

  const int r = lane / 2, half = lane % 2;  // this lane's row within the warp's 16, and its half of the columns
  const int64_t query = q_block * kRows + warp * 16 + r;
  const float scale_log2 = scale * kLog2e;
  float m = -INFINITY, l = 0.0f;
  float o[D / 2] = {};

  for (int64_t k_block = 0; k_block <= q_block; ++k_block) {
    __syncthreads();
    load_tile<D>(k_tile, batch_base + s.q_width() + kvh * D, stride, k_block * kRows, s.seq);
    load_tile<D>(v_tile, batch_base + s.q_width() + s.kv_width() + kvh * D, stride, k_block * kRows, s.seq);
    __syncthreads();
    product_abt<D>(q_tile + warp * 16 * L::kTileLd, k_tile, scores, L::kScoreLd);
    __syncwarp();

    float x[32];
    float row_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int64_t key = k_block * kRows + half * 32 + j;
      x[j] = (key <= query && key < s.seq) ? scores[r * L::kScoreLd + half * 32 + j] * scale_log2 : -INFINITY;
      row_max = fmaxf(row_max, x[j]);
    }
    row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
    const float m_new = fmaxf(m, row_max);
    const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m - m_new);
    float row_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float p = m_new == -INFINITY ? 0.0f : exp2f(x[j] - m_new);
      row_sum += p;
      probs[r * L::kProbLd + half * 32 + j] = __float2bfloat16(p);
    }
    row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
    l = l * alpha + row_sum;
    m = m_new;
    __syncwarp();

    FragAcc pv[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(pv[n], 0.0f);
    accumulate_pb<D>(pv, probs, v_tile);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(scores + n * 16, pv[n], L::kScoreLd, wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = o[i] * alpha + scores[r * L::kScoreLd + half * (D / 2) + i];
    __syncwarp();
  }

  if (query < s.seq) {
    bf16* dst = out + (b * s.seq + query) * s.q_width() + h * D + half * (D / 2);
    const float inv_l = 1.0f / l;
#pragma unroll
    for (int i = 0; i < D / 2; i += 8) {
      Vec16<bf16> v;
#pragma unroll
      for (int k = 0; k < 8; ++k) v.v[k] = __float2bfloat16(o[i + k] * inv_l);
      store16(dst + i, v);
    }
    if (half == 0) lse[(b * s.heads + h) * s.seq + query] = m / kLog2e + logf(l);
  }
}

template <int D>
constexpr size_t backward_smem() {
  using L = Layout<D>;
  return 4 * L::kTileElems * sizeof(bf16) +
         kWarps * (L::kScoreElems * sizeof(float) + 2 * L::kProbElems * sizeof(bf16)) + 2 * kRows * sizeof(float);
}

// dK and dV for one block of 64 keys of one kv head: sums over the group's query heads and the query blocks
// at or after the key block, in a fixed order.
template <int D>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(const bf16* dout, const bf16* qkv, const float* lse,
                                                         const float* delta, AttentionShape s, bf16* dqkv, float scale) {
  using L = Layout<D>;
  extern __shared__ __align__(128) char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  SmemCursor cursor{smem};
  bf16* k_tile = cursor.take<bf16>(L::kTileElems);
  bf16* v_tile = cursor.take<bf16>(L::kTileElems);
  bf16* q_tile = cursor.take<bf16>(L::kTileElems);
  bf16* do_tile = cursor.take<bf16>(L::kTileElems);
  float* scratch = cursor.take<float>(kWarps * L::kScoreElems) + warp * L::kScoreElems;
  bf16* p_t = cursor.take<bf16>(kWarps * 2 * L::kProbElems) + warp * 2 * L::kProbElems;
  bf16* ds_t = p_t + L::kProbElems;
  float* lse_s = cursor.take<float>(kRows);
  float* delta_s = cursor.take<float>(kRows);

  const int64_t k_block = blockIdx.x;
  const int64_t b = blockIdx.y / s.kv_heads, kvh = blockIdx.y % s.kv_heads;
  const int64_t stride = s.qkv_width();
  const bf16* batch_base = qkv + b * s.seq * stride;
  load_tile<D>(k_tile, batch_base + s.q_width() + kvh * D, stride, k_block * kRows, s.seq);
  load_tile<D>(v_tile, batch_base + s.q_width() + s.kv_width() + kvh * D, stride, k_block * kRows, s.seq);

  const int r = lane / 2, half = lane % 2;
  const int64_t key = k_block * kRows + warp * 16 + r;
  const float scale_log2 = scale * kLog2e;
  FragAcc dk[D / 16], dv[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);
  const int64_t q_blocks = (s.seq + kRows - 1) / kRows;

  for (int64_t h = kvh * s.group_size(); h < (kvh + 1) * s.group_size(); ++h) {
    for (int64_t q_block = k_block; q_block < q_blocks; ++q_block) {
      __syncthreads();
      load_tile<D>(q_tile, batch_base + h * D, stride, q_block * kRows, s.seq);
      load_tile<D>(do_tile, dout + b * s.seq * s.q_width() + h * D, s.q_width(), q_block * kRows, s.seq);
      for (int i = threadIdx.x; i < kRows; i += kThreads) {
        const int64_t q = q_block * kRows + i;
        lse_s[i] = q < s.seq ? lse[(b * s.heads + h) * s.seq + q] * kLog2e : 0.0f;
        delta_s[i] = q < s.seq ? delta[(b * s.heads + h) * s.seq + q] : 0.0f;
      }
      __syncthreads();
      // P^T [16 keys x 64 queries] = exp2(K Q^T * scale - lse), zero where the query may not see the key.
      product_abt<D>(k_tile + warp * 16 * L::kTileLd, q_tile, scratch, L::kScoreLd);
      __syncwarp();
      float p[32];
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int c = half * 32 + j;
        const int64_t query = q_block * kRows + c;
        p[j] = (query >= key && query < s.seq && key < s.seq)
                   ? exp2f(scratch[r * L::kScoreLd + c] * scale_log2 - lse_s[c])
                   : 0.0f;
        p_t[r * L::kProbLd + c] = __float2bfloat16(p[j]);
      }
      __syncwarp();
      accumulate_pb<D>(dv, p_t, do_tile);  // dV += P^T dO
      // dP^T = V dO^T; dS^T = P^T (dP^T - delta)
      product_abt<D>(v_tile + warp * 16 * L::kTileLd, do_tile, scratch, L::kScoreLd);
      __syncwarp();
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int c = half * 32 + j;
        ds_t[r * L::kProbLd + c] = __float2bfloat16(p[j] * (scratch[r * L::kScoreLd + c] - delta_s[c]));
      }
      __syncwarp();
      accumulate_pb<D>(dk, ds_t, q_tile);  // dK += dS^T Q
    }
  }
  const int64_t first_key = k_block * kRows + warp * 16;
  bf16* batch_grad = dqkv + b * s.seq * stride;
  store_rows<D>(dk, scratch, scale, batch_grad + s.q_width() + kvh * D, stride, first_key, s.seq);
  store_rows<D>(dv, scratch, 1.0f, batch_grad + s.q_width() + s.kv_width() + kvh * D, stride, first_key, s.seq);
}

// dQ for one block of 64 queries of one head: sums over the key blocks at or before it.
template <int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(const bf16* dout, const bf16* qkv, const float* lse,
                                                       const float* delta, AttentionShape s, bf16* dqkv, float scale) {
  using L = Layout<D>;
  extern __shared__ __align__(128) char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  SmemCursor cursor{smem};
  bf16* q_tile = cursor.take<bf16>(L::kTileElems);
  bf16* do_tile = cursor.take<bf16>(L::kTileElems);
  bf16* k_tile = cursor.take<bf16>(L::kTileElems);
  bf16* v_tile = cursor.take<bf16>(L::kTileElems);
  float* scratch = cursor.take<float>(kWarps * L::kScoreElems) + warp * L::kScoreElems;
  bf16* ds = cursor.take<bf16>(kWarps * L::kProbElems) + warp * L::kProbElems;

  const int64_t q_block = gridDim.x - 1 - blockIdx.x;
  const int64_t b = blockIdx.y / s.heads, h = blockIdx.y % s.heads, kvh = h / s.group_size();
  const int64_t stride = s.qkv_width();
  const bf16* batch_base = qkv + b * s.seq * stride;
  load_tile<D>(q_tile, batch_base + h * D, stride, q_block * kRows, s.seq);
  load_tile<D>(do_tile, dout + b * s.seq * s.q_width() + h * D, s.q_width(), q_block * kRows, s.seq);

  const int r = lane / 2, half = lane % 2;
  const int64_t query = q_block * kRows + warp * 16 + r;
  const bool valid = query < s.seq;
  const float row_lse = valid ? lse[(b * s.heads + h) * s.seq + query] * kLog2e : 0.0f;
  const float row_delta = valid ? delta[(b * s.heads + h) * s.seq + query] : 0.0f;
  const float scale_log2 = scale * kLog2e;
  FragAcc dq[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);

  for (int64_t k_block = 0; k_block <= q_block; ++k_block) {
    __syncthreads();
    load_tile<D>(k_tile, batch_base + s.q_width() + kvh * D, stride, k_block * kRows, s.seq);
    load_tile<D>(v_tile, batch_base + s.q_width() + s.kv_width() + kvh * D, stride, k_block * kRows, s.seq);
    __syncthreads();
    product_abt<D>(q_tile + warp * 16 * L::kTileLd, k_tile, scratch, L::kScoreLd);
    __syncwarp();
    float p[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int64_t key = k_block * kRows + half * 32 + j;
      p[j] = (key <= query && key < s.seq && valid) ? exp2f(scratch[r * L::kScoreLd + half * 32 + j] * scale_log2 - row_lse)
                                                     : 0.0f;
    }
    __syncwarp();
    product_abt<D>(do_tile + warp * 16 * L::kTileLd, v_tile, scratch, L::kScoreLd);  // dP = dO V^T
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int c = half * 32 + j;
      ds[r * L::kProbLd + c] = __float2bfloat16(p[j] * (scratch[r * L::kScoreLd + c] - row_delta));
    }
    __syncwarp();
    accumulate_pb<D>(dq, ds, k_tile);  // dQ += dS K
  }
  store_rows<D>(dq, scratch, scale, dqkv + b * s.seq * stride + h * D, stride, q_block * kRows + warp * 16, s.seq);
}

}  // namespace zb::cuda::flash
