// CudaBackend: the Backend on one GPU. All work goes, in order, onto one CUDA stream; the backend owns that
// stream, the cuBLASLt handle and a scratch buffer that the kernels needing temporary space share (safe
// because the stream runs them one after another). fp32 or bf16 data; statistics and optimizer state fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "core/tracking_allocator.h"
#include "kernels/backend.h"
#include "kernels/backend_options.h"
#include "kernels/timing_summary.h"

namespace zb {

namespace cuda {
class CublasLtGemm;
struct GemmArgs;
class CudnnAttention;
struct Scratch;
}  // namespace cuda

// Which attention kernels ran (op_bench and the tests report it).
struct AttentionUse {
  int64_t cudnn_forward = 0, own_forward = 0, cudnn_backward = 0, own_backward = 0;
  std::string why_not_cudnn;  // the last reason cuDNN had no plan, when asked for it
};

// How often each GELU path ran (op_bench reports which one the measured shapes took).
struct EpilogueUse {
  int64_t gelu_epilogue = 0, gelu_kernel = 0;
  int64_t gelu_backward_epilogue = 0, gelu_backward_kernel = 0;
};

class CudaBackend final : public Backend {
 public:
  // Scratch and the GEMM workspace come from `device_allocator` (its workspace pool).
  CudaBackend(int ordinal, TrackingAllocator& device_allocator, const BackendOptions& options);
  ~CudaBackend() override;

  Device device() const override { return Device::cuda(ordinal_); }
  cudaStream_t stream() const { return stream_; }
  void* native_stream() const override { return stream_; }
  std::vector<std::pair<void*, std::string>> named_streams() const override {
    return {{stream_, "compute"}, {side_stream_, "weight gradients"}, {aside_stream_, "update aside"}};
  }
  const BackendOptions& options() const { return options_; }
  // Takes other choices (tests and op_bench compare them in one process): earlier recordings become stale
  // (RecordedWork::stale), as they hold the old ones, and a change of gemm_algorithms replaces the GEMM plans.
  void set_options(const BackendOptions& options);
  const TimingSummary& gemm_timing() const;
  const EpilogueUse& epilogue_use() const { return epilogue_use_; }
  const AttentionUse& attention_use() const { return attention_use_; }
  std::string kernel_choices() const override;
  size_t workspace_bytes() const override;

  void copy(const Tensor& src, Tensor& dst) override;
  void convert(const Tensor& src, Tensor& dst) override;
  void fill_zero(Tensor& t) override;
  void fill_normal(Tensor& t, uint64_t seed, uint64_t stream, int64_t first, double std) override;
  void fill_value(Tensor& t, double value) override;
  void synchronize() override;
  // The main stream's work captured into a CUDA graph (ZB_PASS_RECORDING=eager: none).
  bool can_record() const override { return options_.pass_recording == PassRecording::graphs; }
  void begin_recording() override;
  std::unique_ptr<RecordedWork> end_recording(std::string& why_not) override;
  void abandon_recording() noexcept override;
  std::unique_ptr<TimingEvent> record_event() override;
  double elapsed_ms(const TimingEvent& start, const TimingEvent& end) override;
  void wait_for(const TimingEvent& event) override;
  void copy_queued(const Tensor& src, Tensor& dst) override;

  void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, bool accumulate) override;
  void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dtable,
                          GradWrite write = GradWrite::add) override;

  void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                         Tensor& mean, Tensor& rstd) override;
  void layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias,
                          GradWrite write = GradWrite::add) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& out, Tensor& rstd,
                       float gain_offset = 0.0f) override;
  void residual_layernorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out, const Tensor& weight,
                                  const Tensor& bias, float eps, Tensor& out, Tensor& mean, Tensor& rstd) override;
  void residual_rmsnorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out, const Tensor& weight, float eps,
                                Tensor& out, Tensor& rstd, float gain_offset = 0.0f) override;
  void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                        Tensor& dweight, GradWrite write = GradWrite::add, float gain_offset = 0.0f) override;
  void qk_norm_forward(const Tensor& qkv_in, const Tensor& q_weight, const Tensor& k_weight, float eps,
                       float gain_offset, const AttentionShape& shape, Tensor& qkv_out, Tensor& rstd) override;
  void qk_norm_backward(const Tensor& dout, const Tensor& qkv_in, const Tensor& q_weight, const Tensor& k_weight,
                        const Tensor& rstd, float gain_offset, const AttentionShape& shape, Tensor& dqkv_in,
                        Tensor& dq_weight, Tensor& dk_weight, GradWrite write = GradWrite::add) override;

  void matmul_forward(const Tensor& inp, const Tensor& weight, const Tensor& bias, Tensor& out) override;
  void matmul_gelu_forward(const Tensor& inp, const Tensor& weight, const Tensor& bias, Tensor& pre,
                           Tensor& out) override;
  void matmul_backward(const Tensor& dout, const Tensor& inp, const Tensor& weight, Tensor& dinp, Tensor& dweight,
                       Tensor& dbias, GradWrite write = GradWrite::add) override;
  void matmul_gelu_backward(const Tensor& dout, const Tensor& inp, const Tensor& weight, const Tensor& pre,
                            Tensor& dpre, Tensor& dweight, Tensor& dbias, GradWrite write = GradWrite::add) override;
  void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, double alpha, bool accumulate,
            Tensor& out) override;
  void dropout_mask(const Tensor& x, double p, uint64_t seed, uint64_t stream, Tensor& out) override;

  void attention_forward(const Tensor& qkv, const AttentionShape& shape, Tensor& out, Tensor& lse) override;
  void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          const AttentionShape& shape, Tensor& dqkv) override;
  void rope_forward(Tensor& qkv, const Tensor& inv_freq, const AttentionShape& shape) override;
  void rope_backward(Tensor& dqkv, const Tensor& inv_freq, const AttentionShape& shape) override;

  void gelu_forward(const Tensor& inp, Tensor& out) override;
  void gelu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) override;
  void relu_forward(const Tensor& inp, Tensor& out) override;
  void relu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) override;
  void swiglu_forward(const Tensor& inp, Tensor& out) override;
  void swiglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) override;
  void geglu_forward(const Tensor& inp, Tensor& out) override;
  void geglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) override;
  void residual_forward(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(const Tensor& x, double factor, Tensor& out) override;

  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab, Tensor& losses) override;
  void cross_entropy_forward_backward(Tensor& logits, const Tensor& targets, int64_t vocab, float grad_scale,
                                      Tensor& losses) override;

  double sum_of_squares(const std::vector<Tensor>& tensors) override;
  void sum_of_squares_into(const std::vector<Tensor>& tensors, Tensor& total) override;
  void accumulate_sum(const Tensor& values, double scale, Tensor& total) override;
  void clip_factor(const Tensor& sum_of_squares, const Tensor& loss, float max_norm, float loss_scale,
                   Tensor& factor) override;
  void optimizer_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& params_out,
                      const OptimizerParams& params) override;
  void optimizer_step_8bit(Tensor& master, const Tensor& grad, const QuantizedMoments& moments, Tensor& params_out,
                           const OptimizerParams& params) override;

  bool begin_aside() override;
  void end_aside() override { aside_ = false; }
  void queue_wait(const TimingEvent& event) override;

 private:
  // Where optimizer_step and record_event queue: the aside stream between begin_aside and end_aside.
  cudaStream_t update_stream() const { return aside_ ? aside_stream_ : stream_; }
  void check_copy(const Tensor& src, const Tensor& dst) const;
  // At least `bytes` of device scratch, valid until the next call (growth waits for the stream first).
  cuda::Scratch scratch(size_t bytes);
  static constexpr size_t kScratchTotalBytes = 256;  // sum_of_squares' total, before its partials
  // A linear layer's backward once its input-gradient GEMM (plain or with the DGELU epilogue) is set: the bias
  // gradient (our column reduction), that GEMM and the weight-gradient GEMM, the latter on the side stream at
  // the same time once both GEMMs' algorithms are chosen (timing a candidate wants the GPU to itself). The side
  // stream fills the multiprocessors the other GEMM leaves idle (a 768 x 768 weight gradient is 36 output
  // tiles for 132 of them); the two write different tensors, so the bits are the same either way.
  template <typename T>
  void linear_backward(const cuda::GemmArgs& input_gradient, const Tensor& dout, const Tensor& inp, int64_t n,
                       int64_t k, int64_t m, Tensor& dweight, Tensor& dbias, GradWrite write);
  // dbias += (or =) dout [n, m]'s column sums by the column reduction.
  template <typename T>
  void reduce_bias(const Tensor& dout, int64_t n, int64_t m, Tensor& dbias, GradWrite write);
  // cuDNN's attention when it is chosen and the data is bf16 (created on first use), else nullptr; defined only
  // in builds with cuDNN (CMake says at configure time when there is none).
  cuda::CudnnAttention* cudnn_attention(const Tensor& qkv);
  // The fused classifier; with write_gradient the logit gradient overwrites the logits.
  void run_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab, Tensor& losses,
                         bool write_gradient, float grad_scale);

  int ordinal_;
  TrackingAllocator& allocator_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  // The stream updates queued aside run on, and the event it starts after.
  cudaStream_t aside_stream_ = nullptr;
  cudaEvent_t aside_fork_ = nullptr;
  bool aside_ = false;
  BackendOptions options_;
  bool recording_ = false;  // the main stream is being captured
  // Counts the changes that make a recording stale: scratch_ or the GEMM plans (and their workspaces) replaced,
  // a kernel choice set.
  uint64_t recording_generation_ = 0;
  std::unique_ptr<cuda::CublasLtGemm> gemm_;
  Buffer scratch_;
  EpilogueUse epilogue_use_;
  // Shared, not unique: a build without cuDNN never creates one, and an empty shared_ptr needs no complete type.
  std::shared_ptr<cuda::CudnnAttention> cudnn_attention_;
  AttentionUse attention_use_;
};

// The number of usable GPUs and a backend for GPU `ordinal`.
std::unique_ptr<Backend> make_cuda_backend(int ordinal, TrackingAllocator& device_allocator,
                                           const BackendOptions& options);

}  // namespace zb
