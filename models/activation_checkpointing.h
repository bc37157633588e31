// Activation checkpointing: which of a block's forward activations are kept for its backward and which are
// computed again from the kept ones when its backward begins. Recomputation runs the same kernels on the same
// inputs in the same order as the forward did, so every recomputed tensor equals the original bit for bit,
// and training with any mode gives the losses and gradients of training without it (with one exception on
// backends that fuse GELU into its GEMM: selective applies it after the GEMM, see Transformer).
//   none       every block keeps every activation its backward reads.
//   full       each block keeps only its input (the residual stream); its backward first runs the block's
//              forward again, up to the MLP's activation (the MLP's output projection is not needed).
//   selective  each block keeps its input and the outputs of the GEMMs that the backward reads and that cost
//              most to compute again: q, k, v (after rotary embedding) and the MLP's input projection. Its
//              backward recomputes the first norm, the attention (a flash kernel, which never keeps the score
//              matrix: a small share of the block's FLOPs at usual sequence lengths), the attention's output
//              projection (the smallest of the block's GEMMs, d_model x d_model at most) with the residual add
//              and the second norm, and the MLP's activation.
//              With Gemma 3's block, q, k, v are kept as projected (before the q/k norms) and the MLP's output
//              projection too (its post-norm reads it); the q/k norms, the rotation and the attention's output
//              projection's post-norm are recomputed with the rest. Full then runs the block up to the MLP's
//              post-norm.
// The recomputed tensors of every block share one set of buffers, which holds one block's at a time.
#pragma once

#include <string_view>

namespace zb {

enum class ActivationCheckpointing { none, full, selective };

// Throws UsageError naming the accepted values.
ActivationCheckpointing parse_activation_checkpointing(std::string_view name);
std::string_view activation_checkpointing_name(ActivationCheckpointing mode);

}  // namespace zb
