// The named model configurations, with Hugging Face names as aliases, and --model resolution.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/transformer_config.h"

namespace zb {

// Canonical names of every registered model, in a stable order.
std::vector<std::string> known_model_names();

// Resolves --model: a registered name or alias (case-insensitive), a Hugging Face config.json, or a folder
// holding one. Throws UsageError listing the known names when nothing matches or the file is malformed.
TransformerConfig resolve_model(std::string_view name_or_path);

}  // namespace zb
