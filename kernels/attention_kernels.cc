#include "kernels/attention_kernels.h"

#include <cstdlib>
#include <string>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

AttentionKernels attention_kernels_from_environment() {
  const char* value = std::getenv("ZB_ATTENTION");
  const std::string text = value ? value : "";
  if (text.empty() || text == "own") return AttentionKernels::own;
  if (text == "cudnn") return AttentionKernels::cudnn;
  throw UsageError(cat("ZB_ATTENTION=", text, ": accepted values are own and cudnn"));
}

}  // namespace zb
