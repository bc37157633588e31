// Hyper-parameters of one optimizer update, as the kernels consume them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zb {

enum class OptimizerKind { adamw, adam, sgd };

OptimizerKind parse_optimizer_kind(std::string_view name);  // throws UsageError listing adamw, adam, sgd
std::string_view optimizer_kind_name(OptimizerKind kind);

struct OptimizerParams {
  OptimizerKind kind = OptimizerKind::adamw;
  float lr = 3e-4f;
  float beta1 = 0.9f;   // Adam/AdamW first moment
  float beta2 = 0.999f; // Adam/AdamW second moment
  float eps = 1e-8f;
  // AdamW: decoupled (p -= lr * wd * p). Adam and SGD: L2, added to the gradient (g += wd * p),
  // as torch.optim does.
  float weight_decay = 0.0f;
  float momentum = 0.9f;  // SGD
  int64_t step = 1;       // 1-based, for Adam's bias correction
  // Every gradient is multiplied by this first: the global-norm clipping factor (and any loss-scale undo).
  float grad_scale = 1.0f;
  // When set (an address on the backend's device, written by Backend::clip_factor), the update reads its
  // gradient factor there instead of grad_scale, and skips itself, writing nothing, when that factor is not
  // finite: a step clips by a norm the host has not seen. The host optimizer takes grad_scale only.
  const float* grad_factor = nullptr;
  // The step's gradients overflowed (loss scaling): the host optimizer changes no state and writes the weights
  // as the master holds them (what they already are). The device's updates skip through a non-finite
  // grad_factor instead.
  bool skip = false;
  // Adam's and AdamW's moments kept as 8-bit codes with a scale a block (kernels/adam_8bit.h), the master
  // weights fp32: the optimizers named adamw8bit and adam8bit.
  bool moments_8bit = false;

  friend bool operator==(const OptimizerParams&, const OptimizerParams&) = default;
};

// The optimizer a name gives (the --optimizer flag's): adamw, adam, sgd, adamw8bit or adam8bit; throws
// UsageError listing them. Sets kind and moments_8bit of `params`.
void set_optimizer(OptimizerParams& params, std::string_view name);
// The name of params' optimizer, as set_optimizer takes it.
std::string optimizer_name(const OptimizerParams& params);

}  // namespace zb
