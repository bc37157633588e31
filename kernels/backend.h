// Backend: every operation of the training step, forward and backward, behind one interface.
// kernels/cpu/ is the reference (fp32/fp64, simple and obviously right) that the fast backends are
// tested against; the model and the engine only ever talk to this interface.
//
// Conventions, the same for every op:
// - Tensors are row-major and contiguous; [N, C] means N rows of C. N counts tokens (batch * seq).
// - Outputs are written (=) unless the comment says "adds". Parameter gradients are added to, so that
//   micro-batches accumulate, or written over when the call says GradWrite::overwrite (the first
//   micro-batch: no zeroing beforehand, and the GEMMs skip reading the old values). The residual-stream
//   gradient dx of the norms is always added to: it already holds the gradient that arrives through the
//   skip connection.
// - Linear layers use PyTorch's layout: weight [out_features, in_features], y = x W^T + b.
// - Ids (tokens, targets, positions) are int32.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "kernels/adam_8bit.h"
#include "kernels/attention_shape.h"
#include "kernels/optimizer_params.h"

namespace zb {

// The dtype of saved statistics (norm mean/rstd, attention log-sum-exp, per-token losses, RoPE frequencies):
// fp32 for every training dtype, fp64 when the data itself is fp64 (the CPU backend's test mode).
inline DType stats_dtype(DType data) { return data == DType::f64 ? DType::f64 : DType::f32; }

// A point in a backend's sequence of work, for timing phases on the device's own clock.
// How an op stores the parameter gradients it computes: added to what the tensors hold, or written over it.
enum class GradWrite { add, overwrite };

class TimingEvent {
 public:
  virtual ~TimingEvent() = default;
};

// Work recorded once (Backend::begin_recording .. end_recording) and queued again as recorded: the same
// kernels with the same arguments on the same buffers, without issuing each launch again (a CUDA graph). What
// the work reads and writes must therefore be at the same addresses, and hold what it should, at each replay.
class RecordedWork {
 public:
  virtual ~RecordedWork() = default;
  // True once the backend has replaced a buffer of its own that the work uses (its scratch grew) or changed a
  // kernel choice it holds: record it again.
  virtual bool stale() const = 0;
  // Queues the work again on the main sequence (not when stale).
  virtual void replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // The device queue the backend's work goes onto (a cudaStream_t for CUDA), for a communicator that must
  // order its collectives after that work; nullptr for the CPU backend, whose work is done when a call returns.
  virtual void* native_stream() const { return nullptr; }
  // Every device queue the backend's work goes onto, named for a trace's lanes (the main one "compute").
  virtual std::vector<std::pair<void*, std::string>> named_streams() const { return {}; }
  // Which implementations the backend chose where it has several (empty where it has one), for the record
  // of a run: a benchmark must say whether a fast library path or a fallback produced its number.
  virtual std::string kernel_choices() const { return {}; }
  // Device memory the backend holds now in the engine's allocator for its own use (GEMM workspaces, kernels'
  // scratch): what the engine's memory plan (engine/memory_plan.h) cannot see and adds as given.
  virtual size_t workspace_bytes() const { return 0; }

  // --- memory and timing ----------------------------------------------------------------------------------
  // Copies between tensors of equal bytes; either side may be on the host or this backend's device.
  // A copy that involves host memory has finished when copy returns.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // dst = src converted to dst's dtype (equal element counts, both on this backend's device).
  virtual void convert(const Tensor& src, Tensor& dst) = 0;
  virtual void fill_zero(Tensor& t) = 0;
  // Initial values drawn where the tensor lives: t[i] = std * random_normal(seed, stream, first + i)
  // (core/random.h) rounded to t's dtype, the values any other device draws for those indices (up to the
  // last bit of its libm's log and cos).
  virtual void fill_normal(Tensor& t, uint64_t seed, uint64_t stream, int64_t first, double std) = 0;
  // t[i] = value, rounded to t's dtype.
  virtual void fill_value(Tensor& t, double value) = 0;
  // Waits until all work issued so far on the main sequence has finished (see begin_aside).
  virtual void synchronize() = 0;
  // Marks the current point of the work; elapsed_ms waits for `end` and returns the time between the two.
  virtual std::unique_ptr<TimingEvent> record_event() = 0;
  virtual double elapsed_ms(const TimingEvent& start, const TimingEvent& end) = 0;
  // Recording (see RecordedWork): where the backend can record work, the work queued between begin_recording
  // and end_recording is recorded instead of run. end_recording returns the recording, or nullptr and why not
  // where the work could not be recorded (it waited on the host, allocated memory, or used the device in a
  // way a recording cannot hold); abandon_recording ends a recording an exception interrupted. Nothing of
  // the work queued while recording has run, either way. record_event() is not for use while recording: time
  // a replay from outside it.
  virtual bool can_record() const { return false; }
  virtual void begin_recording() { throw std::logic_error("begin_recording on a backend that cannot record"); }
  virtual std::unique_ptr<RecordedWork> end_recording(std::string& why_not) {
    why_not = "this backend cannot record work";
    return nullptr;
  }
  virtual void abandon_recording() noexcept {}
  // Blocks the host until the device has passed `event`.
  virtual void wait_for(const TimingEvent& event) = 0;
  // As copy, but queued behind the work issued so far and returning at once: host memory on either side must
  // be page-locked (a PinnedHostMemory's) and left alone, src unchanged and dst unread, until the device has
  // passed the copy (synchronize, or wait_for an event recorded after it). How a step runs without the host
  // waiting for the device until its end.
  virtual void copy_queued(const Tensor& src, Tensor& dst) = 0;

  // --- embedding ------------------------------------------------------------------------------------------
  // out[n] = table[ids[n]] (or out[n] += table[ids[n]] when accumulate). ids [N], table [V, C], out [N, C].
  virtual void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, bool accumulate) = 0;
  // Adds dout[n] to dtable[ids[n]] for every n, in a fixed order (deterministic); overwrite: the rows no id
  // selects become zero.
  virtual void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dtable,
                                  GradWrite write = GradWrite::add) = 0;

  // --- normalisation ----------------------------------------------------------------------------------------
  // LayerNorm over the last axis: x [N, C], weight/bias [C]; saves mean and rstd [N] (stats_dtype) for backward.
  virtual void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                                 Tensor& mean, Tensor& rstd) = 0;
  // Adds to dx; adds to (or overwrites) dweight and dbias.
  virtual void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias,
                                  GradWrite write = GradWrite::add) = 0;
  // RMSNorm: out = x / sqrt(mean(x^2) + eps) * (gain_offset + weight); saves rstd [N]. The offset is 0 for Llama's
  // norms and 1 for Gemma's, whose weights start at zero: added to the weight in fp32 inside the op, never stored
  // (so weight decay and the weight's rounding see the weight itself, as in the model).
  virtual void rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& out, Tensor& rstd,
                               float gain_offset = 0.0f) = 0;
  // The residual add fused into the norm that follows it: residual_out = a + b (in the data dtype), then
  // out = norm(residual_out), as residual_forward followed by layernorm_forward / rmsnorm_forward would give.
  virtual void residual_layernorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out, const Tensor& weight,
                                          const Tensor& bias, float eps, Tensor& out, Tensor& mean, Tensor& rstd) = 0;
  virtual void residual_rmsnorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out, const Tensor& weight,
                                        float eps, Tensor& out, Tensor& rstd, float gain_offset = 0.0f) = 0;
  // Adds to dx; adds to (or overwrites) dweight (the gain's gradient, whatever its offset).
  virtual void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                Tensor& dx, Tensor& dweight, GradWrite write = GradWrite::add,
                                float gain_offset = 0.0f) = 0;
  // Per-head RMSNorm of the query and key heads of a fused qkv (Gemma 3's q_norm and k_norm, before the rotary
  // embedding): each head_dim-wide query head of qkv_in [N, qkv_width] (see AttentionShape) becomes what
  // rmsnorm_forward makes of a row with the gain gain_offset + q_weight, each key head the same with k_weight
  // (q_weight and k_weight [head_dim], shared by the heads); the value heads are copied. Writes all of qkv_out
  // (another tensor than qkv_in) and rstd [N, heads + kv_heads] (stats_dtype; each token's query heads, then its
  // key heads).
  virtual void qk_norm_forward(const Tensor& qkv_in, const Tensor& q_weight, const Tensor& k_weight, float eps,
                               float gain_offset, const AttentionShape& shape, Tensor& qkv_out, Tensor& rstd) = 0;
  // Its backward from dout, the gradient of qkv_out: writes all of dqkv_in (the value heads' part is dout's); adds
  // to (or overwrites) dq_weight and dk_weight, which are not computed where empty (frozen weights).
  virtual void qk_norm_backward(const Tensor& dout, const Tensor& qkv_in, const Tensor& q_weight,
                                const Tensor& k_weight, const Tensor& rstd, float gain_offset,
                                const AttentionShape& shape, Tensor& dqkv_in, Tensor& dq_weight, Tensor& dk_weight,
                                GradWrite write = GradWrite::add) = 0;

  // --- linear layers ----------------------------------------------------------------------------------------
  // out [N, M] = inp [N, K] weight[M, K]^T (+ bias [M] unless bias is empty).
  virtual void matmul_forward(const Tensor& inp, const Tensor& weight, const Tensor& bias, Tensor& out) = 0;
  // pre = matmul_forward(inp, weight, bias), out = gelu(pre): one GEMM with a GELU epilogue where the backend
  // has one (the two values differ from the separate ops' only by where the fp32 pre-activation is rounded).
  virtual void matmul_gelu_forward(const Tensor& inp, const Tensor& weight, const Tensor& bias, Tensor& pre,
                                   Tensor& out) {
    matmul_forward(inp, weight, bias, pre);
    gelu_forward(pre, out);
  }
  // Writes dinp [N, K]; adds to (or overwrites) dweight [M, K] and, unless empty, dbias [M]. An empty dweight
  // (a frozen weight) is not computed: only the input's gradient.
  virtual void matmul_backward(const Tensor& dout, const Tensor& inp, const Tensor& weight, Tensor& dinp,
                               Tensor& dweight, Tensor& dbias, GradWrite write = GradWrite::add) = 0;
  // The backward of a linear layer whose input is gelu(pre), with the GELU's backward folded in: as
  // matmul_backward into dpre followed by gelu_backward(dpre, pre, dpre), in one GEMM with a DGELU epilogue where
  // the backend has one (which rounds once, after the product, where the separate ops round twice).
  virtual void matmul_gelu_backward(const Tensor& dout, const Tensor& inp, const Tensor& weight, const Tensor& pre,
                                    Tensor& dpre, Tensor& dweight, Tensor& dbias, GradWrite write = GradWrite::add) {
    matmul_backward(dout, inp, weight, dpre, dweight, dbias, write);
    gelu_backward(dpre, pre, dpre);
  }

  // out [rows, cols] = alpha op(a) op(b), or += with accumulate; op(x) is x, or x^T where transpose_* says: a is
  // [rows, inner] ([inner, rows] transposed), b [inner, cols] ([cols, inner] transposed). The small products of
  // LoRA adapters, whose scale rides in alpha.
  virtual void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, double alpha, bool accumulate,
                    Tensor& out) = 0;

  // out = x where kept, 0 where dropped (no 1 / (1 - p): the caller scales), each element's fate drawn from
  // (seed, stream) as kernels/dropout_mask.h says: the same elements for the same arguments on every backend, so
  // a backward that draws again drops what its forward dropped. p in [0, 1); out may be x. Exact in every dtype.
  virtual void dropout_mask(const Tensor& x, double p, uint64_t seed, uint64_t stream, Tensor& out) = 0;

  // --- attention --------------------------------------------------------------------------------------------
  // Causal softmax attention, the scores scaled by shape.softmax_scale (by default 1/sqrt(head_dim)), over the
  // shape's sliding window where it has one. qkv [N, qkv_width] (see AttentionShape), out [N, q_width],
  // lse [batch, heads, seq] (stats_dtype): each query row's log-sum-exp, all that backward needs to rebuild the
  // probabilities.
  virtual void attention_forward(const Tensor& qkv, const AttentionShape& shape, Tensor& out, Tensor& lse) = 0;
  // Writes dqkv (all of it: query, key and value parts).
  virtual void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                  const AttentionShape& shape, Tensor& dqkv) = 0;
  // Rotary position embedding, in place on the query and key heads of qkv (the "rotate half" pairing:
  // element i with element i + head_dim/2). The angle of token t, pair i is t * inv_freq[i]; inv_freq [head_dim/2]
  // is stats_dtype.
  virtual void rope_forward(Tensor& qkv, const Tensor& inv_freq, const AttentionShape& shape) = 0;
  // The inverse rotation, in place on dqkv's query and key heads.
  virtual void rope_backward(Tensor& dqkv, const Tensor& inv_freq, const AttentionShape& shape) = 0;

  // --- activations ------------------------------------------------------------------------------------------
  // GELU with the tanh approximation; elementwise.
  virtual void gelu_forward(const Tensor& inp, Tensor& out) = 0;
  virtual void gelu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) = 0;
  virtual void relu_forward(const Tensor& inp, Tensor& out) = 0;
  virtual void relu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) = 0;
  // inp [N, 2F] holds the gate then the up projection; out [N, F] = silu(gate) * up.
  virtual void swiglu_forward(const Tensor& inp, Tensor& out) = 0;
  virtual void swiglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) = 0;
  // As SwiGLU with GELU's tanh form for the gate: out [N, F] = gelu(gate) * up (GeGLU, Gemma's MLP).
  virtual void geglu_forward(const Tensor& inp, Tensor& out) = 0;
  virtual void geglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) = 0;
  // out = x * factor elementwise, the product formed in fp32 (fp64 for fp64 data) and rounded to the dtype once;
  // out may be x. The factor is taken as given: a caller that wants it rounded to the dtype first (Gemma's
  // embedding scale) rounds it. Its own backward: the same op on the gradient.
  virtual void scale(const Tensor& x, double factor, Tensor& out) = 0;
  // out = a + b, elementwise (the residual connection; its backward is the identity on both inputs).
  virtual void residual_forward(const Tensor& a, const Tensor& b, Tensor& out) = 0;

  // --- loss ---------------------------------------------------------------------------------------------------
  // Softmax cross-entropy of logits [N, Vp] against targets [N]; only the first `vocab` columns are classes
  // (the rest is padding). Writes the per-token losses [N] (stats_dtype).
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab, Tensor& losses) = 0;
  // As forward, and overwrites logits with d(loss)/d(logits) * grad_scale (padding columns get 0).
  // grad_scale is 1/N for the mean over N tokens (times 1/micro-batches when accumulating).
  virtual void cross_entropy_forward_backward(Tensor& logits, const Tensor& targets, int64_t vocab, float grad_scale,
                                              Tensor& losses) = 0;

  // --- optimizer ----------------------------------------------------------------------------------------------
  // Sum of the squares of every element of every tensor, accumulated in fp64 in a fixed order
  // (deterministic); the square of the global gradient norm.
  virtual double sum_of_squares(const std::vector<Tensor>& tensors) = 0;
  // The same sum into total (f64 [1] on this backend's device), queued: nothing waits for it.
  virtual void sum_of_squares_into(const std::vector<Tensor>& tensors, Tensor& total) = 0;
  // total (f64 [1]) += scale * the sum of values ([N], stats dtype), added in a fixed order (deterministic):
  // the step's mean loss, gathered where the per-token losses are.
  virtual void accumulate_sum(const Tensor& values, double scale, Tensor& total) = 0;
  // factor (f32 [1]) = torch.nn.utils.clip_grad_norm_'s factor, min(1, max_norm / (sqrt(sum_of_squares) +
  // 1e-6)) computed in fp64 (1 when max_norm is 0), or NaN when sum_of_squares or loss (f64 [1] each) is not
  // finite: optimizer_step given that factor (OptimizerParams::grad_factor) then leaves everything as it was.
  // With gradients that carry a loss scale, the norm is of the true ones and the factor divides the scale out
  // (zb::clip_factor in kernels/clip_factor.h).
  virtual void clip_factor(const Tensor& sum_of_squares, const Tensor& loss, float max_norm, float loss_scale,
                           Tensor& factor) = 0;
  // --- work beside the main sequence ------------------------------------------------------------------------
  // Between begin_aside() and end_aside(), optimizer_step and record_event go onto a second queue of the
  // device's: that work starts once everything queued before begin_aside() is done and runs beside what is
  // queued after end_aside() (a step's update beside the next forward); the main sequence waits for an event
  // recorded there with queue_wait. Every other call stays on the main sequence, and synchronize() does not
  // wait for work queued aside (queue_wait for it first). begin_aside returns false where the work stays in
  // order on the main sequence: a backend without a second queue (the CPU's), or one told to keep it there.
  virtual bool begin_aside() { return false; }
  virtual void end_aside() {}
  // Work queued after this on the main sequence starts once the device has passed `event`.
  virtual void queue_wait(const TimingEvent& event) { (void)event; }

  // One update of master [n] (fp32) from grad [n]; m and v [n] (fp32) are the optimizer state (v unused by SGD).
  // When params_out is not empty it receives the updated master converted to its dtype (the model copy).
  virtual void optimizer_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& params_out,
                              const OptimizerParams& params) = 0;
  // The same with Adam's moments in 8 bits (kernels/adam_8bit.h; params.moments_8bit): master [n] fp32, grad [n]
  // of the model's dtype, the moments' codes and scales (on this backend's device) updated in place.
  virtual void optimizer_step_8bit(Tensor& master, const Tensor& grad, const QuantizedMoments& moments,
                                   Tensor& params_out, const OptimizerParams& params) = 0;
};

}  // namespace zb
