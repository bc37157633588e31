// LayerNorm and RMSNorm with a row spread over a team of threads, each holding one or two 8-column vectors of
// it in registers from its load to its store: the row is read from memory once, where the one-warp-a-row
// kernels (normalization.cu) hold 8 columns a lane at a time and read the row in two or three passes, the
// later ones from L2, with few bytes in flight while a warp walks its columns (46-59% of the copy rate on
// gpt2-xl's rows). The row's sums go through the team's warps' shuffles and a named barrier.
//
// Forward: a block is one team and one row. Backward: a block covers one chunk of the column reduction
// (kRowsPerChunk rows) with up to four teams, whose next rows arrive in shared memory by cp.async while
// this one is worked on; each thread adds its columns' gain and bias terms over its team's
// rows in registers, the teams' sums are added in team order in shared memory and written as the chunk's
// partials, and column_finish_kernel adds the chunks in a fixed order: the same bits on every run.
//
// Needs c % 8 == 0, 16-byte aligned rows, and at most kMaxTeamThreads * kMaxVectorsPerThread vectors a row.
// Reading a row once, from registers, is what beats the warps' two or three passes (the gain and the op_bench
// figures are in the commit that made it). The backward is bound by the instructions of each row's chain, not
// by occupancy or bytes in flight (three rows a team staged): fewer instructions a row are what speed it up.
#pragma once

#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/mma_tiles.cuh"

namespace zb::cuda {

// A team has at most this many threads; a thread holds at most this many vectors of a row (more would spill
// the backward's registers: each vector is 8 floats of dout, x and dx and 16 of gain and bias sums).
constexpr int kMaxTeamThreads = 256, kMaxVectorsPerThread = 2;

// How a row of c columns is spread: `per_thread` 8-column vectors a thread (kV), `threads` a team (whole warps).
struct RowTeam {
  int per_thread = 0, threads = 0;
  bool fits() const { return per_thread > 0; }
};

inline RowTeam row_team_for(int64_t c) {
  RowTeam team;
  const int64_t vectors = c / 8;
  if (c % 8 != 0 || vectors > int64_t(kMaxTeamThreads) * kMaxVectorsPerThread) return team;
  team.per_thread = vectors <= kMaxTeamThreads ? 1 : 2;
  const int threads = int((vectors + team.per_thread - 1) / team.per_thread);
  team.threads = (threads + 31) / 32 * 32;
  return team;
}

// Waits for the `threads` threads of team `team` (whole warps, at most 4 teams) of this block: named barrier
// team + 1 (barrier 0 is __syncthreads'). The ids are immediates so that the compiler reserves those 4, not
// all 16 a block may have.
__device__ __forceinline__ void team_barrier(int team, int threads) {
  switch (team) {
    case 0: asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory"); break;
    case 1: asm volatile("bar.sync 2, %0;" ::"r"(threads) : "memory"); break;
    case 2: asm volatile("bar.sync 3, %0;" ::"r"(threads) : "memory"); break;
    default: asm volatile("bar.sync 4, %0;" ::"r"(threads) : "memory"); break;
  }
}

// The sums of a and b over a team, the same value in every thread of it, added in a fixed order. slots holds
// 2 x 2 x (the team's warps) floats; successive calls alternate between its halves (parity), so a warp that
// runs ahead into the next row cannot overwrite what a slower one has still to read.
__device__ __forceinline__ float2 team_sum2(float a, float b, float* slots, int team, int threads, int parity) {
  const int warps = threads / 32, warp = (threadIdx.x % threads) / 32, lane = threadIdx.x % 32;
  a = warp_sum(a), b = warp_sum(b);
  float* const half = slots + parity * 2 * warps;
  if (lane == 0) half[warp] = a, half[warps + warp] = b;
  team_barrier(team, threads);
  float2 total = make_float2(0.0f, 0.0f);
  for (int w = 0; w < warps; ++w) total.x += half[w], total.y += half[warps + w];
  return total;
}

// One row a block. With b (kResidual) the row is first formed as a + b, rounded to T and stored to residual,
// as a separate residual add would store it. The mean and the variance are two team sums over the values held.
template <typename T, bool kLayerNorm, bool kResidual, int kV>
__global__ void norm_forward_team_kernel(const T* a, const T* b, T* residual, const T* weight, float gain_offset,
                                         const T* bias, float eps, T* out, float* mean, float* rstd, int64_t c) {
  __shared__ float slots[2 * 2 * kMaxTeamThreads / 32];
  const int64_t row = blockIdx.x;
  const int vectors = int(c / 8);
  float x[kV][8];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kV; ++k) {
    const int j = int(threadIdx.x) + k * int(blockDim.x);
    if (j >= vectors) continue;
    const int64_t at = row * c + int64_t(j) * 8;
    load8(a + at, x[k]);
    if constexpr (kResidual) {
      float y[8];
      load8(b + at, y);
#pragma unroll
      for (int e = 0; e < 8; ++e) x[k][e] = to_float(from_float<T>(x[k][e] + y[e]));  // as stored
      store8(residual + at, x[k]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) sum += x[k][e];
  }
  const int threads = int(blockDim.x);
  const float mu = kLayerNorm ? team_sum2(sum, 0.0f, slots, 0, threads, 0).x / float(c) : 0.0f;
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kV; ++k) {
    if (int(threadIdx.x) + k * threads >= vectors) continue;
#pragma unroll
    for (int e = 0; e < 8; ++e) sq += (x[k][e] - mu) * (x[k][e] - mu);
  }
  const float rs = rsqrtf(team_sum2(sq, 0.0f, slots, 0, threads, 1).x / float(c) + eps);
#pragma unroll
  for (int k = 0; k < kV; ++k) {
    const int j = int(threadIdx.x) + k * threads;
    if (j >= vectors) continue;
    float w[8], bb[8];
    load8(weight + int64_t(j) * 8, w);
    if constexpr (kLayerNorm) load8(bias + int64_t(j) * 8, bb);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      x[k][e] = (x[k][e] - mu) * rs * (gain_offset + w[e]);
      if constexpr (kLayerNorm) x[k][e] += bb[e];
    }
    store8(out + row * c + int64_t(j) * 8, x[k]);
  }
  if (threadIdx.x == 0) {
    if constexpr (kLayerNorm) mean[row] = mu;
    rstd[row] = rs;
  }
}

// Rows a backward team holds in shared memory: the one it works on and the next ones arriving by cp.async.
// A thread copies and later reads only its own vectors, so the copies need no barrier, and the bytes in
// flight are bounded by shared memory, not by the registers that hold a row while it is worked on.
constexpr int kStagedRows = 3;
// Teams a backward block: at most 4 (8 rows each of a chunk of 32), fewer where registers or shared memory
// would not fit 4; never more than 1024 threads.
constexpr int kMaxBackwardTeams = 4;
static_assert(kRowsPerChunk % kMaxBackwardTeams == 0 && kMaxBackwardTeams * kMaxTeamThreads <= 1024);

// A backward block's shared memory: the teams' staged rows of dout, x and dx, and 1 or 2 c floats for adding
// the teams' column sums at the end.
inline size_t team_backward_shared_bytes(int teams, int64_t c, size_t element_bytes, int outputs) {
  return size_t(outputs) * c * sizeof(float) + size_t(teams) * kStagedRows * 3 * c * element_bytes;
}

// dx += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight (RMSNorm: no
// mean(dnorm) term, xhat = x * rstd), and the chunk's partial sums of dout * xhat (and dout) per column.
// Bounded so that four teams of one vector a thread (1024 threads) fit the registers (64 a thread; 72-79
// unbounded, which left gpt2-xl's 224-thread teams two a block).
template <typename T, bool kLayerNorm, int kV>
__global__ void __launch_bounds__(kV == 1 ? 1024 : 512)
    norm_backward_team_kernel(const T* dout, const T* x, const T* weight, float gain_offset, const float* mean,
                              const float* rstd, T* dx, int64_t n, int64_t c, int64_t chunks, int team_threads,
                              float* partials) {
  constexpr int kOutputs = kLayerNorm ? 2 : 1, kCopies = 8 * int(sizeof(T)) / 16;  // 16-byte copies a vector
  extern __shared__ float4 shared[];
  float* const team_sums = reinterpret_cast<float*>(shared);  // [gain, bias][c]
  __shared__ float slots[kMaxBackwardTeams][2 * 2 * kMaxTeamThreads / 32];
  const int teams = int(blockDim.x) / team_threads, team = int(threadIdx.x) / team_threads;
  const int in_team = int(threadIdx.x) % team_threads, vectors = int(c / 8);
  T* const staged = reinterpret_cast<T*>(team_sums + kOutputs * c) + int64_t(team) * kStagedRows * 3 * c;
  const int rows_per_team = int(kRowsPerChunk) / teams;
  const int64_t first = int64_t(blockIdx.x) * kRowsPerChunk + int64_t(team) * rows_per_team;
  const int64_t last = min(n, first + rows_per_team);

  // This thread's vectors of dout, x and dx of `row` into stage `stage` (one commit group, empty past the
  // team's last row, so that the group count stays the same for every row).
  auto fetch = [&](int64_t row, int stage) {
    if (row < last) {
      T* const to = staged + int64_t(stage) * 3 * c;
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const int j = in_team + k * team_threads;
        if (j >= vectors) continue;
        const int64_t at = row * c + int64_t(j) * 8;
#pragma unroll
        for (int part = 0; part < kCopies; ++part) {
          const int64_t offset = int64_t(j) * 8 + part * (8 / kCopies);
          mma::cp_async_16(to + offset, dout + at + part * (8 / kCopies), true);
          mma::cp_async_16(to + c + offset, x + at + part * (8 / kCopies), true);
          mma::cp_async_16(to + 2 * c + offset, dx + at + part * (8 / kCopies), true);
        }
      }
    }
    mma::cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kStagedRows - 1; ++s) fetch(first + s, s);
  // The team's rows' mean and rstd, read once here: loaded row by row they put a memory latency on every row.
  __shared__ float2 row_stats[kMaxBackwardTeams][kRowsPerChunk];
  if (in_team < rows_per_team && first + in_team < last) {
    row_stats[team][in_team] = make_float2(kLayerNorm ? mean[first + in_team] : 0.0f, rstd[first + in_team]);
  }
  // The gain (the weight plus its offset), the same for every row, in fp32 in shared memory (where the teams' sums
  // go at the end): read from memory and converted once a block, not once a row.
  float* const weights = team_sums;
  for (int j = int(threadIdx.x); j < vectors; j += int(blockDim.x)) {
    float w[8];
    load8(weight + int64_t(j) * 8, w);
#pragma unroll
    for (int e = 0; e < 8; ++e) w[e] = gain_offset + w[e];
    store8(weights + int64_t(j) * 8, w);
  }
  __syncthreads();

  float gain[kV][8] = {}, bias[kV][8] = {};
  for (int64_t row = first; row < last; ++row) {
    const int i = int(row - first);
    fetch(row + kStagedRows - 1, (i + kStagedRows - 1) % kStagedRows);
    mma::cp_async_wait<kStagedRows - 1>();  // this thread's copies of this row have landed
    const T* const here = staged + int64_t(i % kStagedRows) * 3 * c;
    const float mu = row_stats[team][i].x, rs = row_stats[team][i].y;
    // dout is taken into the gain and bias sums as it arrives, then replaced by dnorm = dout * weight, all the
    // second half needs of it: fewer registers live across the team sum.
    float dnorm[kV][8], xhat[kV][8];
    float sum_dnorm = 0.0f, sum_dnorm_xhat = 0.0f;
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      const int j = in_team + k * team_threads;
      if (j >= vectors) continue;
      float w[8];
      load8(here + int64_t(j) * 8, dnorm[k]), load8(here + c + int64_t(j) * 8, xhat[k]);
      load8(weights + int64_t(j) * 8, w);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        xhat[k][e] = (xhat[k][e] - mu) * rs;
        gain[k][e] += dnorm[k][e] * xhat[k][e];
        if constexpr (kLayerNorm) bias[k][e] += dnorm[k][e];
        dnorm[k][e] *= w[e];
        sum_dnorm += dnorm[k][e];
        sum_dnorm_xhat += dnorm[k][e] * xhat[k][e];
      }
    }
    const float2 sums = team_sum2(sum_dnorm, sum_dnorm_xhat, slots[team], team, team_threads, i & 1);
    const float mean_dnorm = kLayerNorm ? sums.x / float(c) : 0.0f, mean_dnorm_xhat = sums.y / float(c);
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      const int j = in_team + k * team_threads;
      if (j >= vectors) continue;
      float d[8];
      load8(here + 2 * c + int64_t(j) * 8, d);
#pragma unroll
      for (int e = 0; e < 8; ++e) d[e] += rs * (dnorm[k][e] - mean_dnorm - xhat[k][e] * mean_dnorm_xhat);
      store8(dx + row * c + int64_t(j) * 8, d);
    }
  }
  mma::cp_async_wait<0>();
  __syncthreads();  // every team is done with the weights before the teams' sums take their place

  // The teams' sums, added in team order into team 0's registers; then team 0 writes the chunk's partials.
  for (int from = 1; from < teams; ++from) {
    if (team == from) {
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const int j = in_team + k * team_threads;
        if (j >= vectors) continue;
        store8(team_sums + int64_t(j) * 8, gain[k]);
        if constexpr (kLayerNorm) store8(team_sums + c + int64_t(j) * 8, bias[k]);
      }
    }
    __syncthreads();
    if (team == 0) {
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const int j = in_team + k * team_threads;
        if (j >= vectors) continue;
        float more[8];
        load8(team_sums + int64_t(j) * 8, more);
#pragma unroll
        for (int e = 0; e < 8; ++e) gain[k][e] += more[e];
        if constexpr (kLayerNorm) {
          load8(team_sums + c + int64_t(j) * 8, more);
#pragma unroll
          for (int e = 0; e < 8; ++e) bias[k][e] += more[e];
        }
      }
    }
    __syncthreads();
  }
  if (team != 0) return;
#pragma unroll
  for (int k = 0; k < kV; ++k) {
    const int j = in_team + k * team_threads;
    if (j >= vectors) continue;
    store8(partials + int64_t(blockIdx.x) * c + int64_t(j) * 8, gain[k]);
    if constexpr (kLayerNorm) store8(partials + (chunks + blockIdx.x) * c + int64_t(j) * 8, bias[k]);
  }
}

}  // namespace zb::cuda
