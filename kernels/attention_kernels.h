// Whose kernels run bf16 attention on a GPU: ours (kernels/cuda/flash_attention.cuh), or cuDNN's fused
// flash-attention graphs (kernels/cuda/cudnn_attention.h) where the installed cuDNN builds them for the shape,
// ours elsewhere. The environment variable ZB_ATTENTION=own|cudnn picks; ours by default until cuDNN's are
// measured faster on our GPUs.
#pragma once

namespace zb {

enum class AttentionKernels { own, cudnn };

// ZB_ATTENTION's value, or own when it is unset or empty; UsageError naming the variable for anything else
// (the programs check it before any work).
AttentionKernels attention_kernels_from_environment();

}  // namespace zb
