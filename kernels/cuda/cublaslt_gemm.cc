#include "kernels/cuda/cublaslt_gemm.h"

#include <algorithm>
#include <mutex>

#include "core/cuda_check.h"
#include "kernels/cuda/gemm_algorithm_timing.h"

namespace zb::cuda {

namespace {

// The largest power of two (up to 256) dividing the address: cuBLASLt picks kernels by operand alignment.
int alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  return address ? int(std::min<uintptr_t>(256, address & (~address + 1))) : 256;
}

cublasLtEpilogue_t epilogue_of(const GemmArgs& g) {
  if (g.gelu_aux) return g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (g.dgelu_aux) return CUBLASLT_EPILOGUE_DGELU;
  return g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// How many of the heuristic's candidates a timed choice considers (its first is usually within a few
// percent of the best; the rest of the list rarely wins).
constexpr int kTimedCandidates = 8;
// An accumulating GEMM is timed into a scratch C (its own C must keep its contents); larger outputs (the
// vocabulary-sized weight gradient, a GEMM at the GEMM rate anyway) keep the heuristic's pick.
constexpr size_t kMaxScratchBytesForTiming = size_t(64) << 20;

// The timed choices of this process per device and shape: every CublasLtGemm (one per backend) on the device
// takes the same algorithm for a shape, so two runs in one process compute alike.
struct TimedChoices {
  std::mutex mutex;
  std::map<std::pair<int, CublasLtGemm::Key>, cublasLtMatmulAlgo_t> algos;
};
TimedChoices& timed_choices() {
  static TimedChoices choices;
  return choices;
}

}  // namespace

struct CublasLtGemm::Plan {
  Key key;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's, best first; cleared once the choice is made
  bool settled() const { return candidates.empty(); }
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto layout : {a, b, c})
      if (layout) cublasLtMatrixLayoutDestroy(layout);
  }
};

CublasLtGemm::CublasLtGemm(TrackingAllocator& device_allocator, GemmAlgorithms algorithms, size_t workspace_bytes)
    : allocator_(device_allocator), algorithms_(algorithms), workspace_bytes_(workspace_bytes) {
  ZB_CUDA_CHECK(cudaGetDevice(&device_ordinal_));
  ZB_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

CublasLtGemm::Plan* CublasLtGemm::plan_for(const GemmArgs& g) {
  const cublasLtEpilogue_t epilogue = epilogue_of(g);
  const Key key{g.trans_a,
                g.trans_b,
                g.m,
                g.n,
                g.k,
                g.lda,
                g.ldb,
                g.ldc,
                int(g.dtype),
                int(epilogue),
                alignment_of(g.a),
                alignment_of(g.b),
                alignment_of(g.c)};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();

  auto plan = std::make_unique<Plan>();
  plan->key = key;
  ZB_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  ZB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  ZB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  ZB_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  if (g.gelu_aux || g.dgelu_aux) {
    const int64_t aux_ld = g.ldc;
    ZB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  }
  // Layouts are column-major: rows x columns with leading dimension ld.
  ZB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, g.dtype, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda));
  ZB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, g.dtype, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb));
  ZB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, g.dtype, g.m, g.n, g.ldc));

  cublasLtMatmulPreference_t preference = nullptr;
  ZB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                       sizeof workspace_bytes_);
  const uint32_t align_a = alignment_of(g.a), align_b = alignment_of(g.b), align_c = alignment_of(g.c);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                       sizeof align_a);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                       sizeof align_b);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                       sizeof align_c);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                       sizeof align_c);
  cublasLtMatmulHeuristicResult_t results[kTimedCandidates]{};
  int found = 0;
  const int wanted = algorithms_ == GemmAlgorithms::timed ? kTimedCandidates : 1;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                                               preference, wanted, results, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  // An epilogue cuBLASLt does not offer for these types shows as NOT_SUPPORTED or, for some type combinations,
  // INVALID_VALUE: either way the caller falls back.
  const bool unsupported = status == CUBLAS_STATUS_NOT_SUPPORTED ||
                           (status == CUBLAS_STATUS_INVALID_VALUE && epilogue != CUBLASLT_EPILOGUE_DEFAULT);
  if (unsupported || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    plans_[key] = nullptr;
    return nullptr;
  }
  ZB_CUBLAS_CHECK(status);
  plan->algo = results[0].algo;
  if (algorithms_ == GemmAlgorithms::timed) {
    TimedChoices& chosen = timed_choices();
    const std::lock_guard lock(chosen.mutex);
    const auto earlier = chosen.algos.find({device_ordinal_, key});
    if (earlier != chosen.algos.end()) {
      plan->algo = earlier->second;
    } else if (found > 1) {
      for (int i = 0; i < found; ++i) plan->candidates.push_back(results[i].algo);
    }
  }
  return (plans_[key] = std::move(plan)).get();
}

cublasStatus_t CublasLtGemm::launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const GemmArgs& g,
                                    cudaStream_t stream) {
  const float beta = g.accumulate ? 1.0f : 0.0f;
  return cublasLtMatmul(handle_, plan.desc, &g.alpha, g.a, plan.a, g.b, plan.b, &beta, g.c, plan.c, g.c, plan.c, &algo,
                        workspace_for(stream), workspace_bytes_, stream);
}

void* CublasLtGemm::workspace_for(cudaStream_t stream) {
  auto it = workspaces_.find(stream);
  if (it == workspaces_.end()) {
    it = workspaces_.emplace(stream, allocator_.allocate(workspace_bytes_, MemoryPool::workspace)).first;
  }
  return it->second.data();
}

void CublasLtGemm::choose_by_timing(Plan& plan, const GemmArgs& g, cudaStream_t stream) {
  GemmArgs trial = g;
  Buffer scratch_c;
  if (g.accumulate) {
    const size_t bytes = size_t(g.ldc) * size_t(g.n) * (g.dtype == CUDA_R_32F ? 4 : 2);
    if (bytes > kMaxScratchBytesForTiming) return plan.candidates.clear();
    try {
      scratch_c = allocator_.allocate(bytes, MemoryPool::workspace);
    } catch (const OutOfMemory&) {
      return plan.candidates.clear();  // no room to time in: the heuristic's pick
    }
    ZB_CUDA_CHECK(cudaMemsetAsync(scratch_c.data(), 0, bytes, stream));
    trial.c = scratch_c.data();
  }
  const std::vector<float> ms = time_candidates(
      plan.candidates.size(),
      [&](size_t i) { return launch(plan, plan.candidates[i], trial, stream) == CUBLAS_STATUS_SUCCESS; }, stream);
  const size_t chosen = fastest_candidate(ms);
  plan.algo = plan.candidates[chosen];
  plan.candidates.clear();
  timing_summary_.record(ms, chosen);
  TimedChoices& choices = timed_choices();
  const std::lock_guard lock(choices.mutex);
  choices.algos.emplace(std::pair{device_ordinal_, plan.key}, plan.algo);  // a first choice elsewhere stands
}

void CublasLtGemm::run(const GemmArgs& g, cudaStream_t stream) {
  if (!try_run(g, stream)) throw Error(cat("cuBLASLt has no algorithm for m=", g.m, " n=", g.n, " k=", g.k));
}

bool CublasLtGemm::chosen(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return true;
  const Plan* found = plan_for(g);
  return found && found->settled();
}

bool CublasLtGemm::can_run(const GemmArgs& g) {
  return g.m == 0 || g.n == 0 || plan_for(g) != nullptr;
}

bool CublasLtGemm::try_run(const GemmArgs& g, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return true;
  Plan* found = plan_for(g);
  if (!found) return false;
  Plan& plan = *found;
  if (g.bias) {
    ZB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
  }
  if (g.gelu_aux || g.dgelu_aux) {
    const void* aux = g.gelu_aux ? g.gelu_aux : g.dgelu_aux;
    ZB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  }
  if (!plan.settled()) choose_by_timing(plan, g, stream);
  ZB_CUBLAS_CHECK(launch(plan, plan.algo, g, stream));
  return true;
}

}  // namespace zb::cuda
