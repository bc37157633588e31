#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda_check.h"
#include "core/strings.h"
#include "kernels/cuda/cublaslt_gemm.h"
#include "kernels/cuda/cuda_dtype.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_recorded_work.h"
#ifdef ZB_HAVE_CUDNN
#include "kernels/cuda/cudnn_attention.h"
#endif
#include "kernels/op_checks.h"

namespace zb {

namespace {

using bf16 = __nv_bfloat16;
using f16 = __half;

// Returns fn.template operator()<T>() with T = float, __nv_bfloat16 or __half, matching dtype.
template <typename Fn>
auto dispatch(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn.template operator()<float>();
    case DType::bf16: return fn.template operator()<bf16>();
    case DType::f16: return fn.template operator()<f16>();
    default: ZB_CHECK(false, "the CUDA backend computes in fp32, bf16 or fp16, not ", dtype_name(dtype));
  }
  return fn.template operator()<float>();  // not reached: ZB_CHECK threw
}

template <typename T>
cudaDataType_t cuda_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, f16>) return CUDA_R_16F;
  else return CUDA_R_16BF;
}

struct CudaTimingEvent final : TimingEvent {
  cudaEvent_t event = nullptr;
  explicit CudaTimingEvent(cudaStream_t stream) {
    ZB_CUDA_CHECK(cudaEventCreate(&event));
    ZB_CUDA_CHECK(cudaEventRecord(event, stream));
  }
  ~CudaTimingEvent() override { cudaEventDestroy(event); }
};

}  // namespace

CudaBackend::CudaBackend(int ordinal, TrackingAllocator& device_allocator, const BackendOptions& options)
    : ordinal_(ordinal), allocator_(device_allocator), options_(options) {
  ZB_CHECK(device_allocator.device() == Device::cuda(ordinal), "the CUDA backend needs an allocator of ",
           Device::cuda(ordinal).to_string());
  ZB_CUDA_CHECK(cudaSetDevice(ordinal));
  ZB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  gemm_ = std::make_unique<cuda::CublasLtGemm>(device_allocator, options.gemm_algorithms);
  // The side stream for weight-gradient GEMMs; it joins the main stream after each linear layer's backward.
  ZB_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
  ZB_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  ZB_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  // The stream updates queued aside run on. (At the lowest priority, as the main stream: giving the main stream
  // precedence measured no faster.)
  ZB_CUDA_CHECK(cudaStreamCreateWithFlags(&aside_stream_, cudaStreamNonBlocking));
  ZB_CUDA_CHECK(cudaEventCreateWithFlags(&aside_fork_, cudaEventDisableTiming));
}

void CudaBackend::set_options(const BackendOptions& options) {
  if (options.gemm_algorithms != options_.gemm_algorithms) {
    ZB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old plans' workspace may still be in use
    gemm_.reset();
    gemm_ = std::make_unique<cuda::CublasLtGemm>(allocator_, options.gemm_algorithms);
  }
  options_ = options;
  ++recording_generation_;
}

const TimingSummary& CudaBackend::gemm_timing() const {
  return gemm_->timing_summary();
}

CudaBackend::~CudaBackend() {
  // The side stream's work is joined into the main stream's; work queued aside may not have been waited for.
  for (cudaStream_t stream : {stream_, aside_stream_})
    if (stream) cudaStreamSynchronize(stream);
  for (cudaEvent_t event : {fork_, join_, aside_fork_})
    if (event) cudaEventDestroy(event);
  for (cudaStream_t stream : {side_stream_, aside_stream_, stream_})
    if (stream) cudaStreamDestroy(stream);
}

cuda::Scratch CudaBackend::scratch(size_t bytes) {
  if (scratch_.bytes() < bytes) {
    ZB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier kernels may still use the old buffer
    scratch_.reset();
    scratch_ = allocator_.allocate(std::max(bytes, size_t(1) << 20), MemoryPool::workspace);
    ++recording_generation_;  // recordings that use the old buffer are stale
  }
  return {scratch_.data(), scratch_.bytes()};
}

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  check_copy(src, dst);
  if (src.bytes() == 0) return;
  if (src.device.is_cpu() && dst.device.is_cpu()) {
    std::memmove(dst.data, src.data, src.bytes());
    return;
  }
  ZB_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDefault, stream_));
  if (src.device.is_cpu() || dst.device.is_cpu()) ZB_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::check_copy(const Tensor& src, const Tensor& dst) const {
  for (const Tensor* t : {&src, &dst}) {
    ZB_CHECK(t->device.is_cpu() || t->device == device(), "copy between ", src.device.to_string(), " and ",
             dst.device.to_string(), " on ", device().to_string());
  }
  ZB_CHECK(src.bytes() == dst.bytes(), "copy of ", src.describe(), " into ", dst.describe());
}

void CudaBackend::copy_queued(const Tensor& src, Tensor& dst) {
  check_copy(src, dst);
  if (src.bytes()) ZB_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDefault, stream_));
}

void CudaBackend::convert(const Tensor& src, Tensor& dst) {
  checks::on_device(src, device(), "convert source");
  checks::on_device(dst, device(), "convert destination");
  ZB_CHECK(src.numel() == dst.numel(), "convert ", src.describe(), " into ", dst.describe());
  dispatch(src.dtype, [&]<typename S>() {
    dispatch(dst.dtype, [&]<typename D>() { cuda::convert<S, D>(src.as<S>(), dst.as<D>(), src.numel(), stream_); });
  });
}

void CudaBackend::fill_zero(Tensor& t) {
  checks::on_device(t, device(), "fill_zero target");
  if (t.bytes()) ZB_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));
}

void CudaBackend::fill_normal(Tensor& t, uint64_t seed, uint64_t stream, int64_t first, double std) {
  checks::on_device(t, device(), "fill_normal target");
  dispatch(t.dtype,
           [&]<typename T>() { cuda::fill_normal<T>(t.as<T>(), t.numel(), seed, stream, first, std, stream_); });
}

void CudaBackend::fill_value(Tensor& t, double value) {
  checks::on_device(t, device(), "fill_value target");
  dispatch(t.dtype, [&]<typename T>() { cuda::fill_value<T>(t.as<T>(), t.numel(), float(value), stream_); });
}

void CudaBackend::synchronize() {
  ZB_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// Thread-local capture mode: a call from this thread that cannot be captured (an allocation, a wait for the
// device) fails, which ends the recording with the reason, instead of being captured wrongly.
void CudaBackend::begin_recording() {
  ZB_CHECK(can_record(), "begin_recording: ZB_PASS_RECORDING=eager");
  ZB_CHECK(!recording_, "begin_recording while recording");
  ZB_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  recording_ = true;
}

std::unique_ptr<RecordedWork> CudaBackend::end_recording(std::string& why_not) {
  ZB_CHECK(recording_, "end_recording without begin_recording");
  recording_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream_, &graph);
  if (status != cudaSuccess || graph == nullptr) {
    cudaGetLastError();
    why_not = cat("the stream capture failed: ", cudaGetErrorString(status));
    return nullptr;
  }
  return cuda::CudaRecordedWork::instantiate(graph, stream_, recording_generation_, recording_generation_, why_not);
}

void CudaBackend::abandon_recording() noexcept {
  if (!recording_) return;
  recording_ = false;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  cudaGetLastError();
}

std::unique_ptr<TimingEvent> CudaBackend::record_event() {
  ZB_CHECK(!recording_, "record_event while recording: a replay is timed from outside it");
  return std::make_unique<CudaTimingEvent>(update_stream());
}

bool CudaBackend::begin_aside() {
  ZB_CUDA_CHECK(cudaEventRecord(aside_fork_, stream_));
  ZB_CUDA_CHECK(cudaStreamWaitEvent(aside_stream_, aside_fork_));
  aside_ = true;
  return true;
}

void CudaBackend::queue_wait(const TimingEvent& event) {
  ZB_CUDA_CHECK(cudaStreamWaitEvent(stream_, dynamic_cast<const CudaTimingEvent&>(event).event));
}

void CudaBackend::wait_for(const TimingEvent& event) {
  ZB_CUDA_CHECK(cudaEventSynchronize(dynamic_cast<const CudaTimingEvent&>(event).event));
}

double CudaBackend::elapsed_ms(const TimingEvent& start, const TimingEvent& end) {
  const auto& a = dynamic_cast<const CudaTimingEvent&>(start);
  const auto& b = dynamic_cast<const CudaTimingEvent&>(end);
  ZB_CUDA_CHECK(cudaEventSynchronize(b.event));
  float ms = 0;
  ZB_CUDA_CHECK(cudaEventElapsedTime(&ms, a.event, b.event));
  return ms;
}

void CudaBackend::embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, bool accumulate) {
  const auto [v, c] = checks::embedding(ids, table, out, device());
  dispatch(table.dtype, [&]<typename T>() {
    cuda::embedding_forward<T>(ids.as<int32_t>(), table.as<T>(), out.as<T>(), ids.numel(), c, accumulate, stream_);
  });
}

void CudaBackend::embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dtable, GradWrite write) {
  const auto [v, c] = checks::embedding(ids, dtable, dout, device());
  const int64_t n = ids.numel();
  if (write == GradWrite::overwrite) fill_zero(dtable);  // the rows no id selects; the kernel adds to the others
  const cuda::Scratch s = scratch(cuda::embedding_backward_scratch(n));
  dispatch(dtable.dtype, [&]<typename T>() {
    cuda::embedding_backward<T>(ids.as<int32_t>(), dout.as<T>(), dtable.as<T>(), n, c, v, s, stream_);
  });
}

void CudaBackend::layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                                    Tensor& mean, Tensor& rstd) {
  const auto [n, c] = checks::layernorm(x, weight, bias, out, mean, rstd, device());
  dispatch(x.dtype, [&]<typename T>() {
    cuda::layernorm_forward<T>(x.as<T>(), weight.as<T>(), bias.as<T>(), eps, out.as<T>(), mean.as<float>(),
                               rstd.as<float>(), n, c, options_.norm_rows, stream_);
  });
}

void CudaBackend::layernorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, GradWrite write) {
  const auto [n, c] = checks::layernorm(x, weight, dbias, dout, mean, rstd, device());
  checks::same_shape(x, dx, "layernorm dx", device());
  checks::same_shape(weight, dweight, "layernorm dweight", device());
  const cuda::Scratch s = scratch(cuda::column_reduce_scratch(n, c));
  dispatch(x.dtype, [&]<typename T>() {
    cuda::layernorm_backward<T>(dout.as<T>(), x.as<T>(), weight.as<T>(), mean.as<float>(), rstd.as<float>(), dx.as<T>(),
                                dweight.as<T>(), dbias.as<T>(), n, c, write == GradWrite::add, options_.norm_rows, s,
                                stream_);
  });
}

void CudaBackend::rmsnorm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& out, Tensor& rstd,
                                  float gain_offset) {
  const auto [n, c] = checks::rmsnorm(x, weight, out, rstd, device());
  dispatch(x.dtype, [&]<typename T>() {
    cuda::rmsnorm_forward<T>(x.as<T>(), weight.as<T>(), gain_offset, eps, out.as<T>(), rstd.as<float>(), n, c,
                             options_.norm_rows, stream_);
  });
}

void CudaBackend::residual_layernorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out,
                                             const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                                             Tensor& mean, Tensor& rstd) {
  const auto [n, c] = checks::layernorm(a, weight, bias, out, mean, rstd, device());
  checks::same_shape(a, b, "residual input", device());
  checks::same_shape(a, residual_out, "residual output", device());
  dispatch(a.dtype, [&]<typename T>() {
    cuda::residual_layernorm_forward<T>(a.as<T>(), b.as<T>(), residual_out.as<T>(), weight.as<T>(), bias.as<T>(), eps,
                                        out.as<T>(), mean.as<float>(), rstd.as<float>(), n, c, options_.norm_rows,
                                        stream_);
  });
}

void CudaBackend::residual_rmsnorm_forward(const Tensor& a, const Tensor& b, Tensor& residual_out, const Tensor& weight,
                                           float eps, Tensor& out, Tensor& rstd, float gain_offset) {
  const auto [n, c] = checks::rmsnorm(a, weight, out, rstd, device());
  checks::same_shape(a, b, "residual input", device());
  checks::same_shape(a, residual_out, "residual output", device());
  dispatch(a.dtype, [&]<typename T>() {
    cuda::residual_rmsnorm_forward<T>(a.as<T>(), b.as<T>(), residual_out.as<T>(), weight.as<T>(), gain_offset, eps,
                                      out.as<T>(), rstd.as<float>(), n, c, options_.norm_rows, stream_);
  });
}

void CudaBackend::rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                   Tensor& dx, Tensor& dweight, GradWrite write, float gain_offset) {
  const auto [n, c] = checks::rmsnorm(x, weight, dout, rstd, device());
  checks::same_shape(x, dx, "rmsnorm dx", device());
  checks::same_shape(weight, dweight, "rmsnorm dweight", device());
  const cuda::Scratch s = scratch(cuda::column_reduce_scratch(n, c));
  dispatch(x.dtype, [&]<typename T>() {
    cuda::rmsnorm_backward<T>(dout.as<T>(), x.as<T>(), weight.as<T>(), gain_offset, rstd.as<float>(), dx.as<T>(),
                              dweight.as<T>(), n, c, write == GradWrite::add, options_.norm_rows, s, stream_);
  });
}

void CudaBackend::qk_norm_forward(const Tensor& qkv_in, const Tensor& q_weight, const Tensor& k_weight, float eps,
                                  float gain_offset, const AttentionShape& s, Tensor& qkv_out, Tensor& rstd) {
  checks::qk_norm(qkv_in, q_weight, k_weight, qkv_out, rstd, s, device());
  dispatch(qkv_in.dtype, [&]<typename T>() {
    cuda::qk_norm_forward<T>(qkv_in.as<T>(), q_weight.as<T>(), k_weight.as<T>(), eps, gain_offset, s,
                             qkv_out.as<T>(), rstd.as<float>(), stream_);
  });
}

void CudaBackend::qk_norm_backward(const Tensor& dout, const Tensor& qkv_in, const Tensor& q_weight,
                                   const Tensor& k_weight, const Tensor& rstd, float gain_offset,
                                   const AttentionShape& s, Tensor& dqkv_in, Tensor& dq_weight, Tensor& dk_weight,
                                   GradWrite write) {
  checks::qk_norm(qkv_in, q_weight, k_weight, dout, rstd, s, device());
  checks::qk_norm_input_gradient(dout, qkv_in, dqkv_in, device());
  checks::norm_weight_gradient(q_weight, dq_weight, device());
  checks::norm_weight_gradient(k_weight, dk_weight, device());
  const cuda::Scratch sc = scratch(cuda::qk_norm_backward_scratch(s));
  dispatch(qkv_in.dtype, [&]<typename T>() {
    cuda::qk_norm_backward<T>(dout.as<T>(), qkv_in.as<T>(), q_weight.as<T>(), k_weight.as<T>(), rstd.as<float>(),
                              gain_offset, s, dqkv_in.as<T>(), dq_weight.empty() ? nullptr : dq_weight.as<T>(),
                              dk_weight.empty() ? nullptr : dk_weight.as<T>(), write == GradWrite::add, sc, stream_);
  });
}

// Row-major out[n, m] = inp[n, k] weight[m, k]^T is column-major out^T = weight^T(op) inp.
void CudaBackend::matmul_forward(const Tensor& inp, const Tensor& weight, const Tensor& bias, Tensor& out) {
  const auto [n, k, m] = checks::matmul(inp, weight, bias, out, device());
  dispatch(inp.dtype, [&]<typename T>() {
    gemm_->run({.trans_a = true, .trans_b = false, .m = m, .n = n, .k = k, .a = weight.data, .lda = k, .b = inp.data,
                .ldb = k, .c = out.data, .ldc = m, .dtype = cuda_type<T>(), .bias = bias.empty() ? nullptr : bias.data},
               stream_);
  });
}

// The GELU epilogue when cuBLASLt has it for this shape (it computes the tanh form, as our kernel does).
void CudaBackend::matmul_gelu_forward(const Tensor& inp, const Tensor& weight, const Tensor& bias, Tensor& pre,
                                      Tensor& out) {
  const auto [n, k, m] = checks::matmul(inp, weight, bias, pre, device());
  checks::same_shape(pre, out, "matmul_gelu out", device());
  const bool fused = options_.gemm_epilogues == GemmEpilogues::fused && dispatch(inp.dtype, [&]<typename T>() {
    return gemm_->try_run({.trans_a = true, .m = m, .n = n, .k = k, .a = weight.data, .lda = k, .b = inp.data,
                           .ldb = k, .c = out.data, .ldc = m, .dtype = cuda_type<T>(),
                           .bias = bias.empty() ? nullptr : bias.data, .gelu_aux = pre.data},
                          stream_);
  });
  ++(fused ? epilogue_use_.gelu_epilogue : epilogue_use_.gelu_kernel);
  if (!fused) Backend::matmul_gelu_forward(inp, weight, bias, pre, out);
}

void CudaBackend::matmul_backward(const Tensor& dout, const Tensor& inp, const Tensor& weight, Tensor& dinp,
                                  Tensor& dweight, Tensor& dbias, GradWrite write) {
  const auto [n, k, m] = checks::matmul(inp, weight, dbias, dout, device());
  checks::same_shape(inp, dinp, "matmul dinp", device());
  checks::weight_gradient(weight, dweight, device());
  dispatch(inp.dtype, [&]<typename T>() {
    // dinp[n, k] = dout[n, m] weight[m, k]
    linear_backward<T>({.m = k, .n = n, .k = m, .a = weight.data, .lda = k, .b = dout.data, .ldb = m, .c = dinp.data,
                        .ldc = k, .dtype = cuda_type<T>()},
                       dout, inp, n, k, m, dweight, dbias, write);
  });
}

void CudaBackend::matmul_gelu_backward(const Tensor& dout, const Tensor& inp, const Tensor& weight, const Tensor& pre,
                                       Tensor& dpre, Tensor& dweight, Tensor& dbias, GradWrite write) {
  const auto [n, k, m] = checks::matmul(inp, weight, dbias, dout, device());
  checks::same_shape(inp, pre, "matmul_gelu_backward pre", device());
  checks::same_shape(inp, dpre, "matmul_gelu_backward dpre", device());
  checks::weight_gradient(weight, dweight, device());
  const bool fused = options_.gemm_epilogues == GemmEpilogues::fused && dispatch(inp.dtype, [&]<typename T>() {
    // dpre[n, k] = (dout[n, m] weight[m, k]) * gelu'(pre[n, k])
    const cuda::GemmArgs dgelu_gemm{.m = k, .n = n, .k = m, .a = weight.data, .lda = k, .b = dout.data, .ldb = m,
                                    .c = dpre.data, .ldc = k, .dtype = cuda_type<T>(), .dgelu_aux = pre.data};
    if (!gemm_->can_run(dgelu_gemm)) return false;
    linear_backward<T>(dgelu_gemm, dout, inp, n, k, m, dweight, dbias, write);
    return true;
  });
  ++(fused ? epilogue_use_.gelu_backward_epilogue : epilogue_use_.gelu_backward_kernel);
  if (!fused) Backend::matmul_gelu_backward(dout, inp, weight, pre, dpre, dweight, dbias, write);
}

template <typename T>
void CudaBackend::linear_backward(const cuda::GemmArgs& input_gradient, const Tensor& dout, const Tensor& inp,
                                  int64_t n, int64_t k, int64_t m, Tensor& dweight, Tensor& dbias, GradWrite write) {
  // dweight[m, k] += dout[n, m]^T inp[n, k] (= when overwriting: beta 0, the old values never read)
  const cuda::GemmArgs dweight_gemm{.trans_b = true,
                                    .m = k,
                                    .n = m,
                                    .k = n,
                                    .a = inp.data,
                                    .lda = k,
                                    .b = dout.data,
                                    .ldb = m,
                                    .c = dweight.data,
                                    .ldc = k,
                                    .dtype = cuda_type<T>(),
                                    .accumulate = write == GradWrite::add};
  if (dweight.empty()) {  // a frozen weight: the input's gradient alone
    if (!dbias.empty()) reduce_bias<T>(dout, n, m, dbias, write);
    gemm_->run(input_gradient, stream_);
    return;
  }
  if (!gemm_->chosen(input_gradient) || !gemm_->chosen(dweight_gemm)) {
    if (!dbias.empty()) reduce_bias<T>(dout, n, m, dbias, write);
    gemm_->run(input_gradient, stream_);
    gemm_->run(dweight_gemm, stream_);
    return;
  }
  // Both start after the work issued so far; the work issued after waits for both.
  ZB_CUDA_CHECK(cudaEventRecord(fork_, stream_));
  if (!dbias.empty()) reduce_bias<T>(dout, n, m, dbias, write);
  ZB_CUDA_CHECK(cudaStreamWaitEvent(side_stream_, fork_));
  gemm_->run(dweight_gemm, side_stream_);
  gemm_->run(input_gradient, stream_);
  ZB_CUDA_CHECK(cudaEventRecord(join_, side_stream_));
  ZB_CUDA_CHECK(cudaStreamWaitEvent(stream_, join_));
}

// Row-major out[rows, cols] = op(a) op(b) is column-major out^T = op(b)^T op(a)^T: b's storage is b^T column-major,
// so op(b)^T is it, transposed when b is.
void CudaBackend::gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, double alpha,
                       bool accumulate, Tensor& out) {
  const auto [rows, inner, cols] = checks::gemm(a, transpose_a, b, transpose_b, out, device());
  dispatch(a.dtype, [&]<typename T>() {
    gemm_->run({.trans_a = transpose_b, .trans_b = transpose_a, .m = cols, .n = rows, .k = inner, .a = b.data,
                .lda = b.shape[1], .b = a.data, .ldb = a.shape[1], .c = out.data, .ldc = cols, .dtype = cuda_type<T>(),
                .accumulate = accumulate, .alpha = float(alpha)},
               stream_);
  });
}

// linear_backward runs it before the GEMMs: dout was just written (by a norm's backward, the attention backward
// or the DGELU GEMM) and much of it is still in L2; after the two GEMMs that read it with their weights it
// would come from memory.
template <typename T>
void CudaBackend::reduce_bias(const Tensor& dout, int64_t n, int64_t m, Tensor& dbias, GradWrite write) {
  cuda::bias_backward<T>(dout.as<T>(), dbias.as<T>(), n, m, write == GradWrite::add,
                         scratch(cuda::column_reduce_scratch(n, m)), stream_);
}

size_t CudaBackend::workspace_bytes() const { return gemm_->workspace_bytes_held() + scratch_.bytes(); }

std::string CudaBackend::kernel_choices() const {
  std::vector<std::string> lines;
  const AttentionUse& a = attention_use_;
  if (a.cudnn_forward + a.own_forward + a.cudnn_backward + a.own_backward > 0) {
    lines.push_back(cat("attention kernels: cuDNN forward ", a.cudnn_forward, ", backward ", a.cudnn_backward,
                        "; ours forward ", a.own_forward, ", backward ", a.own_backward,
                        a.why_not_cudnn.empty() ? "" : "; cuDNN unavailable: ", a.why_not_cudnn));
  }
  // "<what> timed for N shapes; M took another than <whose> first (K us less for one run of each)".
  auto timed = [&](const char* what, const char* whose, const TimingSummary& t) {
    if (t.shapes_timed == 0) return;
    lines.push_back(cat(what, " timed for ", t.shapes_timed, " shapes; ", t.shapes_changed, " took another than ",
                        whose, " first (", std::lround(t.ms_saved_per_run * 1000.0), " us less for one run of each)"));
  };
#ifdef ZB_HAVE_CUDNN
  if (cudnn_attention_) timed("cuDNN attention forward plans", "the heuristics'", cudnn_attention_->forward_timing());
#endif
  timed("GEMM algorithms", "cuBLASLt's", gemm_->timing_summary());
  return join(lines, "\n");
}

#ifdef ZB_HAVE_CUDNN
cuda::CudnnAttention* CudaBackend::cudnn_attention(const Tensor& qkv) {
  if (options_.attention != AttentionKernels::cudnn || (qkv.dtype != DType::bf16 && qkv.dtype != DType::f16)) {
    return nullptr;
  }
  if (!cudnn_attention_) cudnn_attention_ = std::make_shared<cuda::CudnnAttention>();
  return cudnn_attention_.get();
}
#endif

void CudaBackend::attention_forward(const Tensor& qkv, const AttentionShape& s, Tensor& out, Tensor& lse) {
  checks::attention(qkv, s, out, lse, device());
#ifdef ZB_HAVE_CUDNN
  if (cuda::CudnnAttention* fused = cudnn_attention(qkv)) {
    if (const std::optional<size_t> bytes = fused->forward_workspace(s, qkv.dtype)) {
      const cuda::Scratch sc = scratch(*bytes);
      fused->forward(qkv.data, s, qkv.dtype, out.data, lse.as<float>(), sc.data, stream_);
      ++attention_use_.cudnn_forward;
      return;
    }
    attention_use_.why_not_cudnn = fused->why_unavailable();
  }
#endif
  ++attention_use_.own_forward;
  dispatch(qkv.dtype,
           [&]<typename T>() { cuda::attention_forward<T>(qkv.as<T>(), s, out.as<T>(), lse.as<float>(), stream_); });
}

void CudaBackend::attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                     const AttentionShape& s, Tensor& dqkv) {
  checks::attention(qkv, s, out, lse, device());
  checks::same_shape(out, dout, "attention dout", device());
  checks::same_shape(qkv, dqkv, "attention dqkv", device());
#ifdef ZB_HAVE_CUDNN
  if (cuda::CudnnAttention* fused = cudnn_attention(qkv)) {
    if (const std::optional<size_t> bytes = fused->backward_workspace(s, qkv.dtype)) {
      const cuda::Scratch sc = scratch(*bytes);
      fused->backward(dout.data, qkv.data, out.data, lse.as<float>(), s, qkv.dtype, dqkv.data, sc.data, stream_);
      ++attention_use_.cudnn_backward;
      return;
    }
    attention_use_.why_not_cudnn = fused->why_unavailable();
  }
#endif
  ++attention_use_.own_backward;
  const cuda::Scratch sc = scratch(cuda::attention_backward_scratch(s));
  dispatch(qkv.dtype, [&]<typename T>() {
    cuda::attention_backward<T>(dout.as<T>(), qkv.as<T>(), out.as<T>(), lse.as<float>(), s, dqkv.as<T>(), sc, stream_);
  });
}

void CudaBackend::rope_forward(Tensor& qkv, const Tensor& inv_freq, const AttentionShape& s) {
  checks::rope(qkv, inv_freq, s, device());
  dispatch(qkv.dtype, [&]<typename T>() { cuda::rope_rotate<T>(qkv.as<T>(), inv_freq.as<float>(), s, +1, stream_); });
}

void CudaBackend::rope_backward(Tensor& dqkv, const Tensor& inv_freq, const AttentionShape& s) {
  checks::rope(dqkv, inv_freq, s, device());
  dispatch(dqkv.dtype, [&]<typename T>() { cuda::rope_rotate<T>(dqkv.as<T>(), inv_freq.as<float>(), s, -1, stream_); });
}

void CudaBackend::gelu_forward(const Tensor& inp, Tensor& out) {
  const int64_t n = checks::same_shape(inp, out, "gelu", device());
  dispatch(inp.dtype, [&]<typename T>() { cuda::gelu_forward<T>(inp.as<T>(), out.as<T>(), n, stream_); });
}

void CudaBackend::gelu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  const int64_t n = checks::same_shape(inp, dout, "gelu", device());
  checks::same_shape(inp, dinp, "gelu dinp", device());
  dispatch(inp.dtype,
           [&]<typename T>() { cuda::gelu_backward<T>(dout.as<T>(), inp.as<T>(), dinp.as<T>(), n, stream_); });
}

void CudaBackend::relu_forward(const Tensor& inp, Tensor& out) {
  const int64_t n = checks::same_shape(inp, out, "relu", device());
  dispatch(inp.dtype, [&]<typename T>() { cuda::relu_forward<T>(inp.as<T>(), out.as<T>(), n, stream_); });
}

void CudaBackend::relu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  const int64_t n = checks::same_shape(inp, dout, "relu", device());
  checks::same_shape(inp, dinp, "relu dinp", device());
  dispatch(inp.dtype,
           [&]<typename T>() { cuda::relu_backward<T>(dout.as<T>(), inp.as<T>(), dinp.as<T>(), n, stream_); });
}

void CudaBackend::swiglu_forward(const Tensor& inp, Tensor& out) {
  const auto [n, f] = checks::swiglu(inp, out, device());
  dispatch(inp.dtype, [&]<typename T>() { cuda::swiglu_forward<T>(inp.as<T>(), out.as<T>(), n, f, stream_); });
}

void CudaBackend::swiglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  const auto [n, f] = checks::swiglu(inp, dout, device());
  checks::same_shape(inp, dinp, "swiglu dinp", device());
  dispatch(inp.dtype,
           [&]<typename T>() { cuda::swiglu_backward<T>(dout.as<T>(), inp.as<T>(), dinp.as<T>(), n, f, stream_); });
}

void CudaBackend::geglu_forward(const Tensor& inp, Tensor& out) {
  const auto [n, f] = checks::geglu(inp, out, device());
  dispatch(inp.dtype, [&]<typename T>() { cuda::geglu_forward<T>(inp.as<T>(), out.as<T>(), n, f, stream_); });
}

void CudaBackend::geglu_backward(const Tensor& dout, const Tensor& inp, Tensor& dinp) {
  const auto [n, f] = checks::geglu(inp, dout, device());
  checks::same_shape(inp, dinp, "geglu dinp", device());
  dispatch(inp.dtype,
           [&]<typename T>() { cuda::geglu_backward<T>(dout.as<T>(), inp.as<T>(), dinp.as<T>(), n, f, stream_); });
}

void CudaBackend::scale(const Tensor& x, double factor, Tensor& out) {
  const int64_t n = checks::same_shape(x, out, "scale", device());
  ZB_CHECK(std::isfinite(factor), "scale by ", factor);
  dispatch(x.dtype, [&]<typename T>() { cuda::scale<T>(x.as<T>(), float(factor), out.as<T>(), n, stream_); });
}

void CudaBackend::residual_forward(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = checks::same_shape(a, b, "residual input", device());
  checks::same_shape(a, out, "residual output", device());
  dispatch(a.dtype, [&]<typename T>() { cuda::residual_forward<T>(a.as<T>(), b.as<T>(), out.as<T>(), n, stream_); });
}

void CudaBackend::dropout_mask(const Tensor& x, double p, uint64_t seed, uint64_t stream, Tensor& out) {
  const int64_t n = checks::same_shape(x, out, "dropout", device());
  ZB_CHECK(0 <= p && p < 1, "dropout probability ", p, " outside [0, 1)");
  dispatch(x.dtype, [&]<typename T>() { cuda::dropout_mask<T>(x.as<T>(), p, seed, stream, out.as<T>(), n, stream_); });
}

void CudaBackend::run_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab, Tensor& losses,
                                    bool write_gradient, float grad_scale) {
  const auto [n, padded] = checks::cross_entropy(logits, targets, vocab, losses, device());
  dispatch(logits.dtype, [&]<typename T>() {
    cuda::cross_entropy<T>(logits.as<T>(), targets.as<int32_t>(), n, padded, vocab, losses.as<float>(),
                           write_gradient ? logits.as<T>() : nullptr, grad_scale, stream_);
  });
}

void CudaBackend::cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab, Tensor& losses) {
  run_cross_entropy(logits, targets, vocab, losses, false, 0.0f);
}

void CudaBackend::cross_entropy_forward_backward(Tensor& logits, const Tensor& targets, int64_t vocab, float grad_scale,
                                                 Tensor& losses) {
  run_cross_entropy(logits, targets, vocab, losses, true, grad_scale);
}

double CudaBackend::sum_of_squares(const std::vector<Tensor>& tensors) {
  const cuda::Scratch s = scratch(kScratchTotalBytes);
  Tensor total(s.data, Shape{1}, DType::f64, device());
  sum_of_squares_into(tensors, total);
  double result = 0;
  ZB_CUDA_CHECK(cudaMemcpyAsync(&result, total.data, sizeof result, cudaMemcpyDeviceToHost, stream_));
  ZB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return result;
}

void CudaBackend::sum_of_squares_into(const std::vector<Tensor>& tensors, Tensor& total) {
  checks::expect(total, "sum_of_squares total", Shape{1}, DType::f64, device());
  const size_t slots = tensors.size() * cuda::kSquarePartialsPerTensor;
  // The partials go after the scratch's first bytes, where sum_of_squares keeps the total.
  const cuda::Scratch s = scratch(kScratchTotalBytes + slots * sizeof(double));
  auto* partials = reinterpret_cast<double*>(static_cast<char*>(s.data) + kScratchTotalBytes);
  for (size_t i = 0; i < tensors.size(); ++i) {
    checks::on_device(tensors[i], device(), "sum_of_squares input");
    dispatch(tensors[i].dtype, [&]<typename T>() {
      cuda::sum_of_squares_partials<T>(tensors[i].as<T>(), tensors[i].numel(),
                                       partials + i * cuda::kSquarePartialsPerTensor, stream_);
    });
  }
  cuda::sum_partials(partials, int64_t(slots), total.as<double>(), stream_);
}

void CudaBackend::accumulate_sum(const Tensor& values, double scale, Tensor& total) {
  checks::on_device(values, device(), "accumulate_sum values");
  checks::expect(total, "accumulate_sum total", Shape{1}, DType::f64, device());
  ZB_CHECK(values.dtype == DType::f32, "accumulate_sum takes fp32 values, not ", dtype_name(values.dtype));
  cuda::accumulate_sum(values.as<float>(), values.numel(), scale, total.as<double>(), stream_);
}

void CudaBackend::clip_factor(const Tensor& sum_of_squares, const Tensor& loss, float max_norm, float loss_scale,
                              Tensor& factor) {
  checks::expect(sum_of_squares, "clip_factor sum_of_squares", Shape{1}, DType::f64, device());
  checks::expect(loss, "clip_factor loss", Shape{1}, DType::f64, device());
  checks::expect(factor, "clip_factor factor", Shape{1}, DType::f32, device());
  cuda::clip_factor(sum_of_squares.as<double>(), loss.as<double>(), max_norm, loss_scale, factor.as<float>(), stream_);
}

void CudaBackend::optimizer_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& params_out,
                                 const OptimizerParams& params) {
  checks::optimizer(master, grad, m, v, params_out, params.kind != OptimizerKind::sgd, device());
  ZB_CHECK(master.dtype == DType::f32, "master weights are fp32");
  ZB_CHECK(params_out.empty() || params_out.dtype == grad.dtype, "model weights and gradients share a dtype");
  dispatch(grad.dtype, [&]<typename T>() {
    cuda::optimizer_step<T>(master.as<float>(), grad.as<T>(), m.as<float>(), v.empty() ? nullptr : v.as<float>(),
                            params_out.empty() ? nullptr : params_out.as<T>(), master.numel(), params, update_stream());
  });
}

void CudaBackend::optimizer_step_8bit(Tensor& master, const Tensor& grad, const QuantizedMoments& moments,
                                      Tensor& params_out, const OptimizerParams& params) {
  checks::expect(master, "optimizer_step_8bit master", master.shape, DType::f32, device());
  checks::expect(grad, "optimizer_step_8bit grad", master.shape, grad.dtype, device());
  ZB_CHECK(params_out.empty() || (params_out.dtype == grad.dtype && params_out.numel() == master.numel()),
           "model weights and gradients share a dtype and a length");
  dispatch(grad.dtype, [&]<typename T>() {
    cuda::adam_8bit_step<T>(master.as<float>(), grad.as<T>(), moments, params_out.empty() ? nullptr : params_out.as<T>(),
                            master.numel(), params, update_stream());
  });
}

std::unique_ptr<Backend> make_cuda_backend(int ordinal, TrackingAllocator& device_allocator,
                                           const BackendOptions& options) {
  return std::make_unique<CudaBackend>(ordinal, device_allocator, options);
}

}  // namespace zb
