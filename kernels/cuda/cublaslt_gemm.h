// CublasLtGemm: column-major C = alpha op(A) op(B) (+ C when accumulating) (+ bias[m] epilogue) through cuBLASLt,
// fp32 accumulation (no TF32 in fp32 mode, so fp32 results match the CPU reference). Descriptors and the
// algorithm are cached per shape, so a training step asks cuBLASLt nothing new after the first. With
// GemmAlgorithms::timed the algorithm is the fastest of the heuristic's first candidates, timed on the shape's
// first use (gemm_algorithm_timing.h); otherwise the heuristic's first.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <tuple>

#include "core/tracking_allocator.h"
#include "kernels/backend_options.h"
#include "kernels/timing_summary.h"

namespace zb::cuda {

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  cudaDataType_t dtype = CUDA_R_32F;  // of A, B, C and the bias
  const void* bias = nullptr;         // length m, added to every column of C
  bool accumulate = false;            // C += instead of C =
  float alpha = 1.0f;                 // scales the product (not the bias)
  // With gelu_aux: C = GELU(op(A) op(B) + bias) and gelu_aux (same layout as C) receives the GELU's input.
  void* gelu_aux = nullptr;
  // With dgelu_aux (same layout as C, the GELU's saved input): C = (op(A) op(B)) * GELU'(dgelu_aux), the GELU's
  // backward in the epilogue (DGELU).
  const void* dgelu_aux = nullptr;
};

class CublasLtGemm {
 public:
  // What selects a plan: transposes, sizes, leading dimensions, type, epilogue, operand alignments.
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int, int>;

  CublasLtGemm(TrackingAllocator& device_allocator, GemmAlgorithms algorithms,
               size_t workspace_bytes = size_t(32) << 20);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  void run(const GemmArgs& args, cudaStream_t stream);
  // As run, but returns false (and does nothing) when cuBLASLt has no algorithm for the shape and epilogue:
  // the caller then does the epilogue's work itself.
  bool try_run(const GemmArgs& args, cudaStream_t stream);
  // Whether try_run would run: cuBLASLt has an algorithm for the shape and epilogue (the plan is made and kept).
  bool can_run(const GemmArgs& args);
  // Whether the algorithm for the shape is chosen: its next run times no candidates, so it may share the GPU
  // with other work without spoiling a timed choice.
  bool chosen(const GemmArgs& args);

  const TimingSummary& timing_summary() const { return timing_summary_; }
  // The workspaces made so far (one per stream that ran a GEMM).
  size_t workspace_bytes_held() const { return workspaces_.size() * workspace_bytes_; }

 private:
  struct Plan;
  // The cached plan, or nullptr when cuBLASLt offers no algorithm (also cached).
  Plan* plan_for(const GemmArgs& args);
  // One workspace per stream (made on its first GEMM), so that GEMMs on two streams may run at once.
  void* workspace_for(cudaStream_t stream);
  cublasStatus_t launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const GemmArgs& args, cudaStream_t stream);
  // Times the plan's candidates on these operands (into a scratch C when accumulating) and keeps the fastest.
  void choose_by_timing(Plan& plan, const GemmArgs& args, cudaStream_t stream);

  TrackingAllocator& allocator_;
  GemmAlgorithms algorithms_;
  int device_ordinal_ = 0;
  TimingSummary timing_summary_;
  cublasLtHandle_t handle_ = nullptr;
  size_t workspace_bytes_;
  std::map<cudaStream_t, Buffer> workspaces_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace zb::cuda
