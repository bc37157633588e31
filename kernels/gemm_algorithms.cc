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

OptimizerUpdates optimizer_updates_from_environment() {
  return choice_from_environment<OptimizerUpdates>(
      "ZB_OPTIMIZER_UPDATES", {{"aside", OptimizerUpdates::aside}, {"in_order", OptimizerUpdates::in_order}});
}

}  // namespace zb
