#include "kernels/gemm_algorithms.h"

#include "kernels/environment_choice.h"

namespace zb {

GemmAlgorithms gemm_algorithms_from_environment() {
  return choice_from_environment<GemmAlgorithms>(
      "ZB_GEMM_ALGORITHMS", {{"timed", GemmAlgorithms::timed}, {"heuristic", GemmAlgorithms::heuristic}});
}

}  // namespace zb
