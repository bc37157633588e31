// The rotary embedding's inverse frequencies, inv_freq[i] = theta^(-2i / head_dim), with Llama 3's
// frequency-dependent scaling when the config asks for it (as Hugging Face computes them).
#pragma once

#include <vector>

#include "models/transformer_config.h"

namespace zb {

std::vector<double> rope_inverse_frequencies(const TransformerConfig& config);

}  // namespace zb
