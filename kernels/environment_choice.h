// One of a fixed set of named values, read from an environment variable: the kernel choices (ZB_ATTENTION,
// ZB_GEMM_ALGORITHMS, ZB_WEIGHT_GRADIENTS, ZB_NORM_ROWS, ZB_OPTIMIZER_UPDATES, ZB_PASS_RECORDING) that a
// benchmark or test switches without a rebuild.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

// The value named by `variable`; the first of `accepted` when it is unset or empty; UsageError naming the
// variable and the accepted names for anything else (the programs check before any work).
template <typename Choice>
Choice choice_from_environment(const char* variable, const std::vector<std::pair<std::string, Choice>>& accepted) {
  const char* value = std::getenv(variable);
  const std::string text = value ? value : "";
  if (text.empty()) return accepted.front().second;
  std::vector<std::string> names;
  for (const auto& [name, choice] : accepted) {
    if (name == text) return choice;
    names.push_back(name);
  }
  throw UsageError(cat(variable, "=", text, ": accepted values are ", join(names, ", "), " (the first is the default)"));
}

}  // namespace zb
