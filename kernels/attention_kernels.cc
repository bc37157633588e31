#include "kernels/attention_kernels.h"

#include "kernels/environment_choice.h"

namespace zb {

AttentionKernels attention_kernels_from_environment() {
  return choice_from_environment<AttentionKernels>(
      "ZB_ATTENTION", {{"cudnn", AttentionKernels::cudnn}, {"own", AttentionKernels::own}});
}

}  // namespace zb
