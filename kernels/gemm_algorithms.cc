#include "kernels/gemm_algorithms.h"

#include "kernels/environment_choice.h"

namespace zb {

GemmAlgorithms gemm_algorithms_from_environment() {
  return choice_from_environment<GemmAlgorithms>(
      "ZB_GEMM_ALGORITHMS", {{"timed", GemmAlgorithms::timed}, {"heuristic", GemmAlgorithms::heuristic}});
}

WeightGradients weight_gradients_from_environment() {
  return choice_from_environment<WeightGradients>(
      "ZB_WEIGHT_GRADIENTS", {{"concurrent", WeightGradients::concurrent}, {"serial", WeightGradients::serial}});
}

}  // namespace zb
