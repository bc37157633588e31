// Whose kernels run bf16 attention on a GPU: ours (kernels/cuda/flash_attention.cuh), or cuDNN's fused
// flash-attention graphs (kernels/cuda/cudnn_attention.h) where the installed cuDNN builds them for the shape,
// ours elsewhere. The environment variable ZB_ATTENTION=cudnn|own picks. cuDNN by default: on an H200 its
// graphs run gpt2's attention 1.7x faster than ours (docs/PERFORMANCE.md). Ours are the reproducible choice:
// cuDNN's backward accumulates dQ with atomics, so its runs are not bit-identical; ours are.
#pragma once

namespace zb {

enum class AttentionKernels { own, cudnn };

// ZB_ATTENTION's value, or cudnn when it is unset or empty; UsageError naming the variable for anything else
// (the programs check it before any work).
AttentionKernels attention_kernels_from_environment();

}  // namespace zb
