#include "kernels/attention_kernels.h"

#include <cstdlib>
#include <string>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

AttentionKernels attention_kernels_from_environment() {
  const char* value = std::getenv("ZB_ATTENTION");
  const std::string text = value ? value : "";
  if (text.empty() || text == "cudnn") return AttentionKernels::cudnn;
  if (text == "own") return AttentionKernels::own;
  throw UsageError(cat("ZB_ATTENTION=", text, ": accepted values are cudnn (the default) and own (bit-reproducible)"));
}

}  // namespace zb
