// Flash attention for bf16 with head sizes 64 and 128 on the tensor cores, FlashAttention-2 style: mma.sync
// with ldmatrix operands, the scores and probabilities held in registers (mma_tiles.cuh), K/V (or Q/dO) tiles
// double-buffered in shared memory by cp.async so the next tile's copy overlaps this tile's products.
//
// Forward: a block owns 64 queries of one head (4 warps x 16 rows) and walks the key blocks up to the
// diagonal, rescaling its output online. Backward, deterministically (no atomics), in two kernels: dK/dV per
// block of 64 keys of a kv head, walking the later query blocks of each query head in its group; and dQ per
// block of 64 queries, walking the earlier key blocks. Both rebuild P from the saved log-sum-exp.
//
// A sliding window (AttentionShape::window narrower than the sequence) bounds the walks: a query block's walk
// starts at the key block holding its first query's first key (first_key), and a key block's walk ends at the
// query block holding the last query that sees its last key (last_query), so the work grows with the window, not
// the sequence. Within a walk, a warp skips a block none of whose query-key pairs lies in the band, masks
// elementwise a block where some pair lies outside it (the diagonal block, whose later keys follow earlier
// queries, and blocks holding a key older than a query's window), and runs the others unmasked.
#pragma once

#include "kernels/attention_shape.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mma_tiles.cuh"

namespace zb::cuda::flash {

constexpr int kRows = 64;  // queries (forward, dQ) or keys (dK/dV) per block: 4 warps x 16
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
constexpr int kLd = D + 8;  // row stride in shared memory: the 16-byte pad spreads ldmatrix rows over the banks

// Blocks per multiprocessor the forward and dQ kernels are compiled for (a register cap of 64K / (blocks x
// 128 threads)): for head size 64, three, where the uncapped register use would allow two (dQ) or where four
// would spill (forward); the warps of the other blocks hide each warp's latency.
template <int D>
constexpr int kForwardBlocks = D == 64 ? 3 : 1;
template <int D>
constexpr int kDqBlocks = D == 64 ? 3 : 1;

// The band's width for the masks: the window where it leaves keys out, else wider than any query-key distance.
constexpr int kUnbanded = 0x7fffffff;
__device__ __forceinline__ int band_width(const AttentionShape& s) {
  return s.banded() ? int(s.window) : kUnbanded;
}

// Whether a query `distance` positions after its key (negative: before it) lies outside the band: its key is
// later than it, or `window` or more positions earlier. One unsigned comparison covers both (window > 0).
__device__ __forceinline__ bool outside_band(int distance, int window) {
  return static_cast<unsigned>(distance) >= static_cast<unsigned>(window);
}

// Starts copying rows [first, first + rows) of one head (zero past the sequence) into a [rows][kLd] tile.
template <int D, int kTileRows>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* head, int64_t row_stride, int64_t first, int64_t seq) {
  constexpr int kVecs = D / 8;
  for (int i = threadIdx.x; i < kTileRows * kVecs; i += kThreads) {
    const int r = i / kVecs, c = (i % kVecs) * 8;
    const bool valid = first + r < seq;
    mma::cp_async_16(tile + r * kLd<D> + c, head + (valid ? first + r : 0) * row_stride + c, valid);
  }
}

// The key/value pipeline of the forward and dQ kernels, walking key blocks first_block..last_block (the first
// copied into stage 0 before the walk): starts copying key block k_block + 1 into the other stage (when there is
// one), waits for block k_block's copy, and returns its K tile (V follows it).
template <int D>
__device__ __forceinline__ const bf16* advance_kv(bf16* kv_tiles, const bf16* k_head, const bf16* v_head,
                                                  int64_t stride, int64_t k_block, int64_t first_block,
                                                  int64_t last_block, int64_t seq) {
  constexpr int kTile = kRows * kLd<D>;
  const int stage = int((k_block - first_block) & 1);
  if (k_block < last_block) {
    bf16* next = kv_tiles + 2 * (stage ^ 1) * kTile;
    load_tile<D, kRows>(next, k_head, stride, (k_block + 1) * kRows, seq);
    load_tile<D, kRows>(next + kTile, v_head, stride, (k_block + 1) * kRows, seq);
    mma::cp_async_commit();
    mma::cp_async_wait<1>();
  } else {
    mma::cp_async_wait<0>();
  }
  __syncthreads();
  return kv_tiles + 2 * stage * kTile;
}

// Writes a warp's 16 x D block of C tiles, times `scale`, to rows first_row.. of a head (row_stride apart).
template <int D>
__device__ __forceinline__ void store_rows(const float (&acc)[D / 8][4], float scale, bf16* head, int64_t row_stride,
                                           int64_t first_row, int64_t seq) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = first_row + g + 8 * half;
    if (row >= seq) continue;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      *reinterpret_cast<__nv_bfloat162*>(head + row * row_stride + nt * 8 + 2 * t) =
          __floats2bfloat162_rn(acc[nt][2 * half] * scale, acc[nt][2 * half + 1] * scale);
    }
  }
}

// Row (r = 0: g, r = 1: g + 8) and column of element e of C tile nt, for lane (g, t).
__device__ __forceinline__ int tile_row(int e) { return (threadIdx.x % 32) / 4 + 8 * (e / 2); }
__device__ __forceinline__ int tile_col(int nt, int e) { return nt * 8 + 2 * ((threadIdx.x % 32) % 4) + e % 2; }

// Whether element e of score tile nt (queries by keys) lies outside the band, for a warp whose first query is
// query_minus_key positions after the tile's first key.
__device__ __forceinline__ bool score_outside_band(int nt, int e, int query_minus_key, int window) {
  return outside_band(query_minus_key + tile_row(e) - tile_col(nt, e), window);
}

// For a warp of the forward or dQ kernel whose 16 queries start query_minus_key positions after the first key of
// a key block: whether some query-key pair of the block lies outside the band. That is so in the diagonal block
// (a key after a query, or past the sequence end, later than every real query), and in a block reaching back to
// a key at or before the last query's position less the window.
__device__ __forceinline__ bool block_needs_mask(int query_minus_key, int window) {
  return query_minus_key < kRows || query_minus_key + 15 >= window;
}

// Whether every key of that block lies before the window of the warp's first query, so of all 16: the warp skips
// the block (its queries' windows start later than the walk's, which is its block's first query's).
__device__ __forceinline__ bool block_before_window(int query_minus_key, int window) {
  return query_minus_key - (kRows - 1) >= window;
}

template <int D>
constexpr size_t forward_smem() {
  return size_t(5) * kRows * kLd<D> * sizeof(bf16);  // Q, and K + V twice
}

// One key block of the forward pass for a warp's 16 queries: the scores, the online softmax (the running
// maximum m in log2 units, per-lane partial row sums l) and O += P V. kMasked blocks (block_needs_mask) set the
// scores outside the band to -inf; in the others every key lies in every query's band.
//
// Every row keeps its own key, which lies in the walk's last (diagonal) block, so m is finite at the end. A row
// may have no key in the band in a masked block before its window starts (the walk starts at the window of the
// block's first query, and later queries' windows start later): its maximum stays -inf, and the exponentials
// are then taken against 0 so that alpha and the probabilities are 0, not NaN (-inf less -inf). An unmasked
// block has finite scores only, so its maximum is finite.
template <int D, bool kMasked>
__device__ __forceinline__ void forward_step(float (&o)[D / 8][4], float (&m)[2], float (&l)[2],
                                             const uint32_t (&qa)[D / 16][4], const bf16* k_tile, const bf16* v_tile,
                                             float scale_log2, int query_minus_key, int window) {
  float sc[8][4];
  mma::zero(sc);
  mma::mma_rows_as_columns<D / 16, 8>(sc, qa, k_tile, kLd<D>, 0, 0);
  float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (kMasked && score_outside_band(nt, e, query_minus_key, window)) sc[nt][e] = -INFINITY;
      row_max[e / 2] = fmaxf(row_max[e / 2], sc[nt][e]);
    }
  }
  float alpha[2], reference[2], row_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
    const float m_new = fmaxf(m[r], row_max[r] * scale_log2);
    reference[r] = kMasked && m_new == -INFINITY ? 0.0f : m_new;  // no key of the band yet: see above
    alpha[r] = exp2f(m[r] - reference[r]);  // 0 on the row's first block with a key, where m is still -inf
    m[r] = m_new;
  }
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      sc[nt][e] = exp2f(fmaf(sc[nt][e], scale_log2, -reference[e / 2]));
      row_sum[e / 2] += sc[nt][e];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + row_sum[r];  // per-lane partial; the quad is summed last
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    o[nt][0] *= alpha[0], o[nt][1] *= alpha[0], o[nt][2] *= alpha[1], o[nt][3] *= alpha[1];
  }
  uint32_t pa[4][4];
  mma::c_to_a<4>(pa, sc);
  mma::mma_rows_as_rows<4, D / 8>(o, pa, v_tile, kLd<D>, 0, 0);
}

template <int D>
__global__ void __launch_bounds__(kThreads, kForwardBlocks<D>)
    forward_kernel(const bf16* qkv, AttentionShape s, bf16* out, float* lse, float scale) {
  constexpr int KC = D / 16, kTile = kRows * kLd<D>;
  extern __shared__ __align__(128) char smem[];
  bf16* q_tile = reinterpret_cast<bf16*>(smem);
  bf16* kv_tiles = q_tile + kTile;  // stage st: K at kv_tiles + 2 st kTile, V right after it
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const int64_t q_block = gridDim.x - 1 - blockIdx.x;  // the longest (latest) query blocks start first
  const int64_t b = blockIdx.y / s.heads, h = blockIdx.y % s.heads, kvh = h / s.group_size();
  const int64_t stride = s.qkv_width();
  const bf16* base = qkv + b * s.seq * stride;
  const bf16* k_head = base + s.q_width() + kvh * D;
  const bf16* v_head = k_head + s.kv_width();
  const int64_t q0 = q_block * kRows, first_block = s.first_key(q0) / kRows;
  load_tile<D, kRows>(q_tile, base + h * D, stride, q0, s.seq);
  load_tile<D, kRows>(kv_tiles, k_head, stride, first_block * kRows, s.seq);
  load_tile<D, kRows>(kv_tiles + kTile, v_head, stride, first_block * kRows, s.seq);
  mma::cp_async_commit();

  const int64_t first_query = q0 + warp * 16;
  const int window = band_width(s);
  const float scale_log2 = scale * kLog2e;
  float o[D / 8][4];
  mma::zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  uint32_t qa[KC][4];

  int query_minus_key = int(first_query - first_block * kRows);
  for (int64_t k_block = first_block; k_block <= q_block; ++k_block, query_minus_key -= kRows) {
    const bf16* k_tile = advance_kv<D>(kv_tiles, k_head, v_head, stride, k_block, first_block, q_block, s.seq);
    if (k_block == first_block) mma::load_a<KC>(qa, q_tile, kLd<D>, warp * 16, 0);
    if (block_before_window(query_minus_key, window)) {
      // nothing for this warp in this block
    } else if (block_needs_mask(query_minus_key, window)) {
      forward_step<D, true>(o, m, l, qa, k_tile, k_tile + kTile, scale_log2, query_minus_key, window);
    } else {
      forward_step<D, false>(o, m, l, qa, k_tile, k_tile + kTile, scale_log2, query_minus_key, window);
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    o[nt][0] /= l[0], o[nt][1] /= l[0], o[nt][2] /= l[1], o[nt][3] /= l[1];
  }
  store_rows<D>(o, 1.0f, out + b * s.seq * s.q_width() + h * D, s.q_width(), first_query, s.seq);
  if (lane % 4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t query = first_query + lane / 4 + 8 * r;
      if (query < s.seq) lse[(b * s.heads + h) * s.seq + query] = m[r] / kLog2e + logf(l[r]);
    }
  }
}

// Query rows per step of the dK/dV kernel: fewer for head size 128, where the accumulators take the registers.
template <int D>
constexpr int kBackwardQueryRows = D == 64 ? 64 : 32;

template <int D>
constexpr size_t dkdv_smem() {
  constexpr int BQ = kBackwardQueryRows<D>;
  return (size_t(2) * kRows + 4 * BQ) * kLd<D> * sizeof(bf16) + 4 * BQ * sizeof(float);
}

// 4-byte asynchronous copy, for the per-row statistics.
__device__ __forceinline__ void cp_async_4(float* dst, const float* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(mma::smem_address(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}

// One step of the dK/dV kernel for a warp's 16 keys (A fragments ka, va of K and V) against BQ queries: P^T
// rebuilt from the saved log-sum-exp, dV += P^T dO, dS^T = P^T (dP^T - delta) with dP^T = V dO^T, and
// dK += dS^T Q. kMasked steps zero the pairs outside the band (query_minus_key: the first query's position
// less the warp's first key's) and drop the queries past the sequence end (valid_queries of the block are
// real); in the others every query lies after the key block, inside the sequence and within every key's window.
template <int D, int BQ, bool kMasked>
__device__ __forceinline__ void dkdv_step(float (&dk)[D / 8][4], float (&dv)[D / 8][4], const uint32_t (&ka)[D / 16][4],
                                          const uint32_t (&va)[D / 16][4], const bf16* q_tile, const bf16* do_tile,
                                          const float* lse_s, const float* delta_s, float scale_log2,
                                          int query_minus_key, int window, int valid_queries) {
  constexpr int KC = D / 16;
  float p[BQ / 8][4];  // P^T: keys by queries
  mma::zero(p);
  mma::mma_rows_as_columns<KC, BQ / 8>(p, ka, q_tile, kLd<D>, 0, 0);
#pragma unroll
  for (int nt = 0; nt < BQ / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = tile_col(nt, e);
      p[nt][e] = exp2f(fmaf(p[nt][e], scale_log2, -lse_s[c] * kLog2e));
      if (kMasked && (outside_band(query_minus_key + c - tile_row(e), window) || c >= valid_queries)) {
        p[nt][e] = 0.0f;
      }
    }
  }
  uint32_t pa[BQ / 16][4];
  mma::c_to_a<BQ / 16>(pa, p);
  mma::mma_rows_as_rows<BQ / 16, D / 8>(dv, pa, do_tile, kLd<D>, 0, 0);  // dV += P^T dO

  float dp[BQ / 8][4];  // dP^T = V dO^T
  mma::zero(dp);
  mma::mma_rows_as_columns<KC, BQ / 8>(dp, va, do_tile, kLd<D>, 0, 0);
#pragma unroll
  for (int nt = 0; nt < BQ / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dp[nt][e] = p[nt][e] * (dp[nt][e] - delta_s[tile_col(nt, e)]);  // dS^T
  }
  uint32_t dsa[BQ / 16][4];
  mma::c_to_a<BQ / 16>(dsa, dp);
  mma::mma_rows_as_rows<BQ / 16, D / 8>(dk, dsa, q_tile, kLd<D>, 0, 0);  // dK += dS^T Q
}

template <int D>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(const bf16* dout, const bf16* qkv, const float* lse,
                                                        const float* delta, AttentionShape s, bf16* dqkv, float scale) {
  constexpr int KC = D / 16, BQ = kBackwardQueryRows<D>, kKvTile = kRows * kLd<D>, kQTile = BQ * kLd<D>;
  extern __shared__ __align__(128) char smem[];
  bf16* k_tile = reinterpret_cast<bf16*>(smem);
  bf16* v_tile = k_tile + kKvTile;
  bf16* qdo_tiles = v_tile + kKvTile;  // stage st: Q at qdo_tiles + 2 st kQTile, dO right after it
  float* stats = reinterpret_cast<float*>(qdo_tiles + 4 * kQTile);  // stage st: lse at stats + 2 st BQ, delta after
  const int warp = threadIdx.x / 32;

  const int64_t k_block = blockIdx.x, k0 = k_block * kRows;
  const int64_t b = blockIdx.y / s.kv_heads, kvh = blockIdx.y % s.kv_heads;
  const int64_t stride = s.qkv_width();
  const bf16* base = qkv + b * s.seq * stride;
  load_tile<D, kRows>(k_tile, base + s.q_width() + kvh * D, stride, k0, s.seq);
  load_tile<D, kRows>(v_tile, base + s.q_width() + s.kv_width() + kvh * D, stride, k0, s.seq);

  // Steps: for each query head of the group, each block of BQ queries from the one holding this key block's
  // start to the one holding the last query that sees its last key.
  const int64_t first_q_block = k0 / BQ, last_q_block = s.last_query(std::min(k0 + kRows, s.seq) - 1) / BQ;
  const int64_t per_head = last_q_block - first_q_block + 1, steps = per_head * s.group_size();
  auto issue = [&](int64_t step, int stage) {
    const int64_t h = kvh * s.group_size() + step / per_head, q0 = (first_q_block + step % per_head) * BQ;
    bf16* q_dst = qdo_tiles + 2 * stage * kQTile;
    load_tile<D, BQ>(q_dst, base + h * D, stride, q0, s.seq);
    load_tile<D, BQ>(q_dst + kQTile, dout + b * s.seq * s.q_width() + h * D, s.q_width(), q0, s.seq);
    const int64_t row0 = (b * s.heads + h) * s.seq + q0;
    for (int i = threadIdx.x; i < BQ; i += kThreads) {
      const bool valid = q0 + i < s.seq;
      cp_async_4(stats + 2 * stage * BQ + i, lse + (valid ? row0 + i : 0), valid);
      cp_async_4(stats + (2 * stage + 1) * BQ + i, delta + (valid ? row0 + i : 0), valid);
    }
    mma::cp_async_commit();
  };
  issue(0, 0);  // the same group as K and V

  const int64_t first_key = k0 + warp * 16;
  const int window = band_width(s);
  const float scale_log2 = scale * kLog2e;
  float dk[D / 8][4], dv[D / 8][4];
  mma::zero(dk);
  mma::zero(dv);
  uint32_t ka[KC][4], va[KC][4];  // this warp's keys and values, loaded once
  for (int64_t step = 0; step < steps; ++step) {
    const int stage = int(step & 1);
    if (step + 1 < steps) {
      issue(step + 1, stage ^ 1);
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    __syncthreads();
    if (step == 0) {
      mma::load_a<KC>(ka, k_tile, kLd<D>, warp * 16, 0);
      mma::load_a<KC>(va, v_tile, kLd<D>, warp * 16, 0);
    }
    const bf16* q_tile = qdo_tiles + 2 * stage * kQTile;
    const bf16* do_tile = q_tile + kQTile;
    const float* lse_s = stats + 2 * stage * BQ;
    const float* delta_s = lse_s + BQ;
    const int64_t q0 = (first_q_block + step % per_head) * BQ;
    // Skipped: every query past the window of the warp's last (so of every) key, which the walk, bounded by the
    // block's last key, may reach for the earlier warps. Unmasked: every query after the key block, inside the
    // sequence, and within the window of the warp's first (so of every) key.
    if (q0 - (first_key + 15) >= window) {
      // nothing for this warp in this step
    } else if (q0 >= k0 + kRows && q0 + BQ <= s.seq && q0 + BQ - 1 < first_key + window) {
      dkdv_step<D, BQ, false>(dk, dv, ka, va, q_tile, do_tile, lse_s, delta_s, scale_log2, 0, window, BQ);
    } else {
      dkdv_step<D, BQ, true>(dk, dv, ka, va, q_tile, do_tile, lse_s, delta_s, scale_log2, int(q0 - first_key), window,
                             int(s.seq - q0));
    }
    __syncthreads();
  }
  bf16* grad = dqkv + b * s.seq * stride;
  store_rows<D>(dk, scale, grad + s.q_width() + kvh * D, stride, first_key, s.seq);
  store_rows<D>(dv, 1.0f, grad + s.q_width() + s.kv_width() + kvh * D, stride, first_key, s.seq);
}

template <int D>
constexpr size_t dq_smem() {
  return size_t(6) * kRows * kLd<D> * sizeof(bf16);  // Q, dO, and K + V twice
}

// One key block of the dQ kernel for a warp's 16 queries (A fragments qa, doa of Q and dO): P rebuilt from
// the log-sum-exp (row_lse, in log2 units), dS = P (dO V^T - delta), dQ += dS K. kMasked blocks (as in the
// forward) zero P outside the band; P comes from the finite log-sum-exp, so a row without a key in the block
// is all zeros, not NaN.
template <int D, bool kMasked>
__device__ __forceinline__ void dq_step(float (&dq)[D / 8][4], const uint32_t (&qa)[D / 16][4],
                                        const uint32_t (&doa)[D / 16][4], const bf16* k_tile, const bf16* v_tile,
                                        const float (&row_lse)[2], const float (&row_delta)[2], float scale_log2,
                                        int query_minus_key, int window) {
  constexpr int KC = D / 16;
  float p[8][4];
  mma::zero(p);
  mma::mma_rows_as_columns<KC, 8>(p, qa, k_tile, kLd<D>, 0, 0);
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      p[nt][e] = exp2f(fmaf(p[nt][e], scale_log2, -row_lse[e / 2]));
      if (kMasked && score_outside_band(nt, e, query_minus_key, window)) p[nt][e] = 0.0f;
    }
  }
  float ds[8][4];  // dP = dO V^T, then dS = P (dP - delta)
  mma::zero(ds);
  mma::mma_rows_as_columns<KC, 8>(ds, doa, v_tile, kLd<D>, 0, 0);
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) ds[nt][e] = p[nt][e] * (ds[nt][e] - row_delta[e / 2]);
  }
  uint32_t dsa[4][4];
  mma::c_to_a<4>(dsa, ds);
  mma::mma_rows_as_rows<4, D / 8>(dq, dsa, k_tile, kLd<D>, 0, 0);  // dQ += dS K
}

template <int D>
__global__ void __launch_bounds__(kThreads, kDqBlocks<D>)
    dq_kernel(const bf16* dout, const bf16* qkv, const float* lse, const float* delta, AttentionShape s, bf16* dqkv,
              float scale) {
  constexpr int KC = D / 16, kTile = kRows * kLd<D>;
  extern __shared__ __align__(128) char smem[];
  bf16* q_tile = reinterpret_cast<bf16*>(smem);
  bf16* do_tile = q_tile + kTile;
  bf16* kv_tiles = do_tile + kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const int64_t q_block = gridDim.x - 1 - blockIdx.x;
  const int64_t b = blockIdx.y / s.heads, h = blockIdx.y % s.heads, kvh = h / s.group_size();
  const int64_t stride = s.qkv_width();
  const bf16* base = qkv + b * s.seq * stride;
  const bf16* k_head = base + s.q_width() + kvh * D;
  const bf16* v_head = k_head + s.kv_width();
  const int64_t q0 = q_block * kRows, first_block = s.first_key(q0) / kRows;
  load_tile<D, kRows>(q_tile, base + h * D, stride, q0, s.seq);
  load_tile<D, kRows>(do_tile, dout + b * s.seq * s.q_width() + h * D, s.q_width(), q0, s.seq);
  load_tile<D, kRows>(kv_tiles, k_head, stride, first_block * kRows, s.seq);
  load_tile<D, kRows>(kv_tiles + kTile, v_head, stride, first_block * kRows, s.seq);
  mma::cp_async_commit();

  const int64_t first_query = q0 + warp * 16;
  const int window = band_width(s);
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t query = first_query + lane / 4 + 8 * r;
    const bool valid = query < s.seq;
    row_lse[r] = valid ? lse[(b * s.heads + h) * s.seq + query] * kLog2e : 0.0f;
    row_delta[r] = valid ? delta[(b * s.heads + h) * s.seq + query] : 0.0f;
  }
  const float scale_log2 = scale * kLog2e;
  float dq[D / 8][4];
  mma::zero(dq);
  uint32_t qa[KC][4], doa[KC][4];  // this warp's queries and output gradients, loaded once

  int query_minus_key = int(first_query - first_block * kRows);
  for (int64_t k_block = first_block; k_block <= q_block; ++k_block, query_minus_key -= kRows) {
    const bf16* k_tile = advance_kv<D>(kv_tiles, k_head, v_head, stride, k_block, first_block, q_block, s.seq);
    if (k_block == first_block) {
      mma::load_a<KC>(qa, q_tile, kLd<D>, warp * 16, 0);
      mma::load_a<KC>(doa, do_tile, kLd<D>, warp * 16, 0);
    }
    if (block_before_window(query_minus_key, window)) {
      // nothing for this warp in this block
    } else if (block_needs_mask(query_minus_key, window)) {
      dq_step<D, true>(dq, qa, doa, k_tile, k_tile + kTile, row_lse, row_delta, scale_log2, query_minus_key, window);
    } else {
      dq_step<D, false>(dq, qa, doa, k_tile, k_tile + kTile, row_lse, row_delta, scale_log2, query_minus_key, window);
    }
    __syncthreads();
  }
  store_rows<D>(dq, scale, dqkv + b * s.seq * stride + h * D, stride, first_query, s.seq);
}

}  // namespace zb::cuda::flash
