#include "kernels/cuda/cudnn_attention.h"

#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cuda_check.h"
#include "core/check.h"
#include "core/errors.h"
#include "core/strings.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cudnn_graph.h"
#include "kernels/cuda/gemm_algorithm_timing.h"

namespace zb::cuda {

namespace {

using cudnn::Dims;
using cudnn::Graph;
using cudnn::TensorSpec;

// The ids the variant pack binds pointers to.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegativeInfinity,
  kDout,
  kDq,
  kDk,
  kDv,
  kOne,
  kSoftmaxSum,     // the backward's per-row dot(dout, out), in the workspace
  kDqAccumulator,  // the backward's fp32 query gradient, in the workspace
  kWindow,         // the sliding window's width, bound only where the shape is banded
};

// The first cuDNN whose fusion engines take the sliding window's mask (as cuDNN's frontend requires).
constexpr int kBandVersion = 90200;

// qkv's elements as raw 16 bits (bf16 or fp16 alike), for offsets into it.
using Element = uint16_t;

size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The sliding window where it leaves keys out; 0 where the attention is causal over the whole sequence.
int64_t band(const AttentionShape& shape) {
  return shape.banded() ? shape.window : 0;
}

// Views of the fused projection and of the other tensors, as 4-D [batch, heads, seq, head_dim] strides.
struct Layout {
  int64_t b, h, kv, s, d, w;
  int64_t window;        // band(shape): 0 builds no band mask
  cudnnDataType_t data;  // of qkv, out and their gradients: bf16 or fp16
  Layout(const AttentionShape& shape, DType dtype)
      : b(shape.batch),
        h(shape.heads),
        kv(shape.kv_heads),
        s(shape.seq),
        d(shape.head_dim),
        w(shape.qkv_width()),
        window(band(shape)),
        data(dtype == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16) {}

  // Query heads of qkv (or of dqkv).
  TensorSpec query(int64_t uid) const { return {{b, h, s, d}, {s * w, d, w, 1}, data, uid}; }
  // Key or value heads of qkv (or dqkv), as stored.
  TensorSpec key_value(int64_t uid) const { return {{b, kv, s, d}, {s * w, d, w, 1}, data, uid}; }
  // The same, transposed in the last two dimensions by the strides alone.
  TensorSpec key_value_transposed(int64_t uid) const {
    return {{b, kv, d, s}, {s * w, d, 1, w}, data, uid};
  }
  // out, dout, and per-query-head key/value gradients: [tokens, heads * head_dim].
  TensorSpec per_query_head(int64_t uid) const {
    return {{b, h, s, d}, {s * h * d, d, h * d, 1}, data, uid};
  }
  // lse and the backward's row sums: [batch, heads, seq] fp32.
  TensorSpec rows(int64_t uid) const { return {{b, h, s, 1}, {h * s, s, 1, 1}, CUDNN_DATA_FLOAT, uid}; }
  Dims scores() const { return {b, h, s, s}; }
  Dims row_dims() const { return {b, h, s, 1}; }
  // Scores transposed by strides (keys by queries), in the data type for the products that read them.
  TensorSpec scores_transposed() const { return {{b, h, s, s}, {h * s * s, s * s, 1, s}, data, 0}; }

  size_t dq_accumulator_bytes() const { return round_up(size_t(b * h * s * d) * sizeof(float)); }
  size_t softmax_sum_bytes() const { return round_up(size_t(b * h * s) * sizeof(float)); }
  size_t per_query_head_bytes() const { return round_up(size_t(b * s * h * d) * 2); }
  bool grouped() const { return kv != h; }
};

TensorSpec scalar(int64_t uid) { return {{1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, uid, true}; }

// scores where the key is not after the query, -infinity elsewhere (the causal mask), as cuDNN's fusion
// engines expect it: indices of rows and columns, a comparison, a select.
Graph::Tensor causal_mask(Graph& g, const Layout& l, Graph::Tensor scores, Graph::Tensor negative_infinity,
                          cudnnDataType_t index_precision) {
  Graph::Tensor row = g.intermediate(l.scores(), CUDNN_DATA_INT32);
  Graph::Tensor col = g.intermediate(l.scores(), CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, row, nullptr, nullptr, index_precision, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, col, nullptr, nullptr, index_precision, 3);
  Graph::Tensor keep = g.intermediate(l.scores(), CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, nullptr, CUDNN_DATA_BOOLEAN);
  Graph::Tensor masked = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, masked, negative_infinity, keep);
  return masked;
}

// The causal mask and, where the layout is banded, the sliding window's after it: the scores whose key lies
// among the query's `window` latest positions (col + window > row), -infinity elsewhere. The window's mask is
// built as cuDNN's frontend builds its sliding-window (left-bound) mask, the shape its fusion engines recognise
// (cuDNN 9.2 on): fresh row and column indices of the causally masked scores, the window (a by-value fp32
// scalar) added to the column index in fp32, a comparison, a select.
Graph::Tensor attention_mask(Graph& g, const Layout& l, Graph::Tensor scores, Graph::Tensor negative_infinity,
                             cudnnDataType_t index_precision) {
  Graph::Tensor causal = causal_mask(g, l, scores, negative_infinity, index_precision);
  if (l.window == 0) return causal;
  Graph::Tensor window = g.tensor(scalar(kWindow));
  Graph::Tensor row = g.intermediate(l.scores(), CUDNN_DATA_INT32);
  Graph::Tensor col = g.intermediate(l.scores(), CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, causal, row, nullptr, nullptr, index_precision, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, causal, col, nullptr, nullptr, index_precision, 3);
  Graph::Tensor reach = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_ADD, col, reach, window, nullptr, CUDNN_DATA_FLOAT, 3);
  Graph::Tensor keep = g.intermediate(l.scores(), CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GT, reach, keep, row, nullptr, CUDNN_DATA_BOOLEAN);
  Graph::Tensor masked = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, causal, masked, negative_infinity, keep);
  return masked;
}

// O = softmax(mask(Q K^T * scale)) V, and the rows' log-sum-exp.
void build_forward(Graph& g, const Layout& l, cudnnDataType_t index_precision) {
  Graph::Tensor q = g.tensor(l.query(kQ)), k_t = g.tensor(l.key_value_transposed(kK));
  Graph::Tensor v = g.tensor(l.key_value(kV)), o = g.tensor(l.per_query_head(kO));
  Graph::Tensor stats = g.tensor(l.rows(kStats));
  Graph::Tensor scale = g.tensor(scalar(kScale)), negative_infinity = g.tensor(scalar(kNegativeInfinity));

  Graph::Tensor products = g.intermediate(l.scores()), scaled = g.intermediate(l.scores());
  g.matmul(q, k_t, products);
  g.pointwise(CUDNN_POINTWISE_MUL, products, scaled, scale);
  Graph::Tensor masked = attention_mask(g, l, scaled, negative_infinity, index_precision);
  Graph::Tensor row_max = g.intermediate(l.row_dims()), shifted = g.intermediate(l.scores());
  Graph::Tensor exps = g.intermediate(l.scores()), row_sum = g.intermediate(l.row_dims());
  Graph::Tensor log_sum = g.intermediate(l.row_dims());
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, row_max);
  g.pointwise(CUDNN_POINTWISE_SUB, masked, shifted, row_max);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, exps);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, exps, row_sum);
  g.pointwise(CUDNN_POINTWISE_LOG, row_sum, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, row_max, stats, log_sum);
  Graph::Tensor probabilities = g.intermediate(l.scores(), l.data);  // the second product's input type
  g.pointwise(CUDNN_POINTWISE_DIV, exps, probabilities, row_sum);
  g.matmul(probabilities, v, o);
}

// dV = P^T dO, dS = P (dO V^T - rowsum(dO o O)) * scale, dK = dS^T Q, dQ = dS K (through an fp32 accumulator).
void build_backward(Graph& g, const Layout& l, cudnnDataType_t index_precision) {
  Graph::Tensor q = g.tensor(l.query(kQ)), k_t = g.tensor(l.key_value_transposed(kK));
  Graph::Tensor v_t = g.tensor(l.key_value_transposed(kV)), o = g.tensor(l.per_query_head(kO));
  Graph::Tensor dout = g.tensor(l.per_query_head(kDout)), stats = g.tensor(l.rows(kStats));
  Graph::Tensor scale = g.tensor(scalar(kScale)), negative_infinity = g.tensor(scalar(kNegativeInfinity));
  Graph::Tensor one = g.tensor(scalar(kOne));
  Graph::Tensor dq = g.tensor(l.query(kDq));
  Graph::Tensor dk = g.tensor(l.grouped() ? l.per_query_head(kDk) : l.key_value(kDk));
  Graph::Tensor dv = g.tensor(l.grouped() ? l.per_query_head(kDv) : l.key_value(kDv));
  Graph::Tensor softmax_sum = g.tensor(l.rows(kSoftmaxSum));
  const Dims full{l.b, l.h, l.s, l.d};
  Graph::Tensor dq_accumulator = g.tensor({full, cudnn::packed_strides(full), CUDNN_DATA_FLOAT, kDqAccumulator});

  Graph::Tensor dout_o = g.intermediate(full), dout_o_sum = g.intermediate(l.row_dims());
  g.pointwise(CUDNN_POINTWISE_MUL, dout, dout_o, o);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dout_o, dout_o_sum);
  g.pointwise(CUDNN_POINTWISE_MUL, dout_o_sum, softmax_sum, one);

  Graph::Tensor products = g.intermediate(l.scores()), scaled = g.intermediate(l.scores());
  Graph::Tensor centred = g.intermediate(l.scores());
  g.matmul(q, k_t, products);
  g.pointwise(CUDNN_POINTWISE_MUL, products, scaled, scale);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, centred, stats);
  Graph::Tensor masked = attention_mask(g, l, centred, negative_infinity, index_precision);
  Graph::Tensor probabilities = g.intermediate(l.scores());
  g.pointwise(CUDNN_POINTWISE_EXP, masked, probabilities);

  Graph::Tensor probabilities_t = g.tensor(l.scores_transposed());
  g.reshape(probabilities, probabilities_t);
  g.matmul(probabilities_t, dout, dv);

  Graph::Tensor dp = g.intermediate(l.scores()), dp_centred = g.intermediate(l.scores());
  Graph::Tensor ds_unscaled = g.intermediate(l.scores()), ds = g.intermediate(l.scores());
  g.matmul(dout, v_t, dp);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, dp_centred, softmax_sum);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_centred, ds_unscaled, probabilities);
  g.pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, ds, scale);

  Graph::Tensor ds_t = g.tensor(l.scores_transposed());
  g.reshape(ds, ds_t);
  g.matmul(ds_t, q, dk);

  TensorSpec k_view = l.key_value(0);
  k_view.dtype = CUDNN_DATA_FLOAT;
  Graph::Tensor k = g.tensor(k_view);
  g.reshape(k_t, k);
  g.matmul(ds, k, dq_accumulator);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accumulator, dq);
}

// How many of the heuristics' forward plans the first run times. The backward keeps the heuristics' first:
// its alternatives measured much slower where tried, and timing them would need the fp32 dQ accumulator's
// state restored between trials.
constexpr size_t kForwardCandidates = 4;

// Up to `most` plans of one direction's graph, or none with the reason: cuDNN may refuse an attribute or an
// operation while the graph is assembled (an older version), or offer no engine for the whole.
std::vector<cudnn::Plan> build(cudnnHandle_t handle, void (*assemble)(Graph&, const Layout&, cudnnDataType_t),
                               const Layout& layout, cudnnDataType_t index_precision, size_t most,
                               std::string* why) {
  try {
    Graph g;
    assemble(g, layout, index_precision);
    return g.build(handle, why, most);
  } catch (const Error& e) {
    *why = e.what();
    return {};
  }
}

}  // namespace

struct CudnnAttention::Plans {
  // The forward's candidates until its first run has timed them, then the fastest alone; the backward's one.
  std::vector<cudnn::Plan> forward, backward;
  std::string forward_why, backward_why;
  float scale = 1.0f, negative_infinity = 0.0f, one = 1.0f, window = 0.0f;  // the by-value scalars, read at execution
  bool banded = false;  // whether the graphs take the window (kWindow)
};

CudnnAttention::CudnnAttention() { cudnn::check(cudnnCreate(&handle_), "cudnnCreate"); }

CudnnAttention::~CudnnAttention() {
  plans_.clear();
  if (handle_) cudnnDestroy(handle_);
}

CudnnAttention::Plans& CudnnAttention::plans_for(const AttentionShape& s, DType dtype) {
  ZB_CHECK(dtype == DType::bf16 || dtype == DType::f16, "cuDNN attention takes bf16 or fp16, not ", dtype_name(dtype));
  const Key key{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, band(s), int(dtype)};
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto plans = std::make_unique<Plans>();
  const int version = int(cudnnGetVersion());
  // -infinity where the fusion engines take it (cuDNN 9.10 on); the lowest float before.
  plans->negative_infinity =
      version >= 91000 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::lowest();
  const Layout layout(s, dtype);
  plans->banded = layout.window != 0;
  plans->window = float(layout.window);
  // Head sizes up to 256 build on Hopper (Gemma 3's 256 among them); Ampere's backward stops at 128, where the
  // graph's build fails and says so.
  if (s.head_dim % 8 != 0 || s.head_dim > 256 || s.kv_heads <= 0 || s.heads % s.kv_heads != 0) {
    plans->forward_why = plans->backward_why =
        cat("cuDNN's fused attention takes head sizes that are multiples of 8 up to 256 (this one: ", s.head_dim, ")");
  } else if (plans->banded && version < kBandVersion) {
    plans->forward_why = plans->backward_why =
        cat("cuDNN's fused attention takes a sliding window from cuDNN ", kBandVersion / 10000, ".",
            kBandVersion / 100 % 100, " on (this one: ", version / 10000, ".", version / 100 % 100, ".", version % 100,
            ")");
  } else {
    // The index generators' precision: fp32 is what current cuDNN front ends declare, int32 what earlier ones
    // did; the first that builds is kept.
    for (const cudnnDataType_t precision : {CUDNN_DATA_FLOAT, CUDNN_DATA_INT32}) {
      if (plans->forward.empty()) {
        plans->forward = build(handle_, build_forward, layout, precision, kForwardCandidates, &plans->forward_why);
      }
      if (plans->backward.empty()) {
        plans->backward = build(handle_, build_backward, layout, precision, 1, &plans->backward_why);
      }
    }
  }
  if (!plans->forward.empty()) plans->forward_why.clear();
  if (!plans->backward.empty()) plans->backward_why.clear();
  return *(plans_[key] = std::move(plans));
}

std::optional<size_t> CudnnAttention::forward_workspace(const AttentionShape& s, DType dtype) {
  const Plans& plans = plans_for(s, dtype);
  why_ = plans.forward_why.empty() ? "" : cat("forward: ", plans.forward_why);
  if (plans.forward.empty()) return std::nullopt;
  int64_t most = 0;  // any candidate may be the one that runs
  for (const cudnn::Plan& p : plans.forward) most = std::max(most, p.workspace_bytes());
  return size_t(most);
}

std::optional<size_t> CudnnAttention::backward_workspace(const AttentionShape& s, DType dtype) {
  const Plans& plans = plans_for(s, dtype);
  why_ = plans.backward_why.empty() ? "" : cat("backward: ", plans.backward_why);
  if (plans.backward.empty()) return std::nullopt;
  const Layout l(s, dtype);
  const size_t grouped = l.grouped() ? 2 * l.per_query_head_bytes() : 0;
  return l.dq_accumulator_bytes() + l.softmax_sum_bytes() + grouped + size_t(plans.backward.front().workspace_bytes());
}

void CudnnAttention::forward(const void* qkv, const AttentionShape& s, DType dtype, void* out, float* lse,
                             void* workspace, cudaStream_t stream) {
  Plans& plans = plans_for(s, dtype);
  ZB_CHECK(!plans.forward.empty(), "cuDNN attention forward without a plan: ", plans.forward_why);
  const auto* base = static_cast<const Element*>(qkv);
  const int64_t key_offset = s.q_width(), value_offset = s.q_width() + s.kv_width();
  cudnn::check(cudnnSetStream(handle_, stream), "cudnnSetStream");
  plans.scale = float(s.scores_scale());  // (a by-value scalar: the plans do not depend on it)
  std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale, kNegativeInfinity};
  std::vector<void*> pointers{const_cast<Element*>(base), const_cast<Element*>(base + key_offset),
                              const_cast<Element*>(base + value_offset), out, lse, &plans.scale,
                              &plans.negative_infinity};
  if (plans.banded) {
    uids.push_back(kWindow);
    pointers.push_back(&plans.window);
  }
  if (plans.forward.size() > 1) {
    // The forward only writes out and lse, so each candidate may run on the real operands.
    const std::vector<float> ms = time_candidates(
        plans.forward.size(),
        [&](size_t i) {
          try {
            plans.forward[i].execute(handle_, uids, pointers, workspace);
            return true;
          } catch (const Error&) {
            return false;
          }
        },
        stream);
    const size_t chosen = fastest_candidate(ms);
    forward_timing_.record(ms, chosen);
    cudnn::Plan fastest = std::move(plans.forward[chosen]);
    plans.forward.clear();
    plans.forward.push_back(std::move(fastest));
  }
  plans.forward.front().execute(handle_, uids, pointers, workspace);
}

void CudnnAttention::backward(const void* dout, const void* qkv, const void* out, const float* lse,
                              const AttentionShape& s, DType dtype, void* dqkv, void* workspace, cudaStream_t stream) {
  Plans& plans = plans_for(s, dtype);
  ZB_CHECK(!plans.backward.empty(), "cuDNN attention backward without a plan: ", plans.backward_why);
  const Layout l(s, dtype);
  const auto* base = static_cast<const Element*>(qkv);
  auto* dbase = static_cast<Element*>(dqkv);
  const int64_t key_offset = s.q_width(), value_offset = s.q_width() + s.kv_width();
  auto* bytes = static_cast<char*>(workspace);
  void* dq_accumulator = bytes;
  void* softmax_sum = bytes + l.dq_accumulator_bytes();
  char* rest = bytes + l.dq_accumulator_bytes() + l.softmax_sum_bytes();
  void* dk = dbase + key_offset;
  void* dv = dbase + value_offset;
  if (l.grouped()) {  // per-query-head gradients first, summed into dqkv's groups below
    dk = rest;
    dv = rest + l.per_query_head_bytes();
    rest += 2 * l.per_query_head_bytes();
  }
  cudnn::check(cudnnSetStream(handle_, stream), "cudnnSetStream");
  plans.scale = float(s.scores_scale());
  std::vector<int64_t> uids{kQ, kK, kV, kO, kDout, kStats, kScale, kNegativeInfinity, kOne, kDq, kDk, kDv,
                            kSoftmaxSum, kDqAccumulator};
  std::vector<void*> pointers{const_cast<Element*>(base), const_cast<Element*>(base + key_offset),
                              const_cast<Element*>(base + value_offset), const_cast<void*>(out),
                              const_cast<void*>(dout), const_cast<float*>(lse), &plans.scale,
                              &plans.negative_infinity, &plans.one, dbase, dk, dv, softmax_sum, dq_accumulator};
  if (plans.banded) {
    uids.push_back(kWindow);
    pointers.push_back(&plans.window);
  }
  plans.backward.front().execute(handle_, uids, pointers, rest);
  if (l.grouped()) {
    const auto sum_groups = [&]<typename T>() {
      sum_head_groups(static_cast<const T*>(dk), s, reinterpret_cast<T*>(dbase + key_offset), stream);
      sum_head_groups(static_cast<const T*>(dv), s, reinterpret_cast<T*>(dbase + value_offset), stream);
    };
    if (dtype == DType::f16) sum_groups.template operator()<__half>();
    else sum_groups.template operator()<__nv_bfloat16>();
  }
}

}  // namespace zb::cuda
