#include "kernels/cuda/cublaslt_gemm.h"

#include <algorithm>

#include "core/cuda_check.h"

namespace zb::cuda {

namespace {

// The largest power of two (up to 256) dividing the address: cuBLASLt picks kernels by operand alignment.
int alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  return address ? int(std::min<uintptr_t>(256, address & (~address + 1))) : 256;
}

cublasLtEpilogue_t epilogue_of(const GemmArgs& g) {
  if (g.bias_grad) return CUBLASLT_EPILOGUE_BGRADB;
  if (g.gelu_aux) return g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (g.dgelu_aux) return CUBLASLT_EPILOGUE_DGELU;
  return g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

}  // namespace

struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto layout : {a, b, c})
      if (layout) cublasLtMatrixLayoutDestroy(layout);
  }
};

CublasLtGemm::CublasLtGemm(TrackingAllocator& device_allocator, size_t workspace_bytes)
    : workspace_(device_allocator.allocate(workspace_bytes, MemoryPool::workspace)) {
  ZB_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

const CublasLtGemm::Plan* CublasLtGemm::plan_for(const GemmArgs& g) {
  const cublasLtEpilogue_t epilogue = epilogue_of(g);
  const Key key{g.trans_a, g.trans_b,   g.m,          g.n,
                g.k,       g.lda,       g.ldb,        g.ldc,
                int(g.dtype), int(epilogue), alignment_of(g.a), alignment_of(g.b),
                alignment_of(g.c), g.bias_grad ? int(g.bias_grad_dtype) : -1};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();

  auto plan = std::make_unique<Plan>();
  ZB_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  ZB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  ZB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  ZB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  if (g.gelu_aux || g.dgelu_aux) {
    const int64_t aux_ld = g.ldc;
    ZB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  }
  if (g.bias_grad) {
    ZB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &g.bias_grad_dtype,
                                                   sizeof g.bias_grad_dtype));
  }
  // Layouts are column-major: rows x columns with leading dimension ld.
  ZB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, g.dtype, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda));
  ZB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, g.dtype, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb));
  ZB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, g.dtype, g.m, g.n, g.ldc));

  cublasLtMatmulPreference_t preference = nullptr;
  ZB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const size_t workspace_bytes = workspace_.bytes();
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                       sizeof workspace_bytes);
  const uint32_t align_a = alignment_of(g.a), align_b = alignment_of(g.b), align_c = alignment_of(g.c);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                                               preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  // An epilogue cuBLASLt does not offer for these types shows as NOT_SUPPORTED or, for some type combinations
  // (a BGRADB into fp32 from bf16 matrices), INVALID_VALUE: either way the caller falls back.
  const bool unsupported = status == CUBLAS_STATUS_NOT_SUPPORTED ||
                           (status == CUBLAS_STATUS_INVALID_VALUE && epilogue != CUBLASLT_EPILOGUE_DEFAULT);
  if (unsupported || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    plans_[key] = nullptr;
    return nullptr;
  }
  ZB_CUBLAS_CHECK(status);
  plan->algo = result.algo;
  return (plans_[key] = std::move(plan)).get();
}

void CublasLtGemm::run(const GemmArgs& g, cudaStream_t stream) {
  if (!try_run(g, stream)) throw Error(cat("cuBLASLt has no algorithm for m=", g.m, " n=", g.n, " k=", g.k));
}

bool CublasLtGemm::try_run(const GemmArgs& g, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return true;
  const Plan* found = plan_for(g);
  if (!found) return false;
  const Plan& plan = *found;
  if (g.bias_grad) {
    ZB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias_grad, sizeof g.bias_grad));
  } else if (g.bias) {
    ZB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
  }
  if (g.gelu_aux || g.dgelu_aux) {
    const void* aux = g.gelu_aux ? g.gelu_aux : g.dgelu_aux;
    ZB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  }
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  ZB_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, g.a, plan.a, g.b, plan.b, &beta, g.c, plan.c, g.c, plan.c,
                                 &plan.algo, workspace_.data(), workspace_.bytes(), stream));
  return true;
}

}  // namespace zb::cuda
