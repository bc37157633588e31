// The rotary embedding's inverse frequencies, inv_freq[i] = theta^(-2i / head_dim), with Llama 3's
// frequency-dependent scaling or the "linear" scaling (frequencies divided by the factor) when the config asks for
// it (as Hugging Face computes them). Gemma 3's sliding-window layers have a base of their own, unscaled.
#pragma once

#include <vector>

#include "models/transformer_config.h"

namespace zb {

// The frequencies of the layers that rotate by rope_theta (local = false), or of those that rotate by
// local_rope_theta (local = true; the config must have one).
std::vector<double> rope_inverse_frequencies(const TransformerConfig& config, bool local = false);

}  // namespace zb
