// Reads a model's architecture from a Hugging Face config.json (model_type gpt2, opt, llama, mistral, gemma3_text,
// or gemma3's text model).
// Only the architecture is read; no weights are loaded.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "models/transformer_config.h"

namespace zb {

// Throws zb::Error saying which field is missing, malformed or unsupported.
TransformerConfig config_from_hf_json(const nlohmann::json& json, const std::string& name);
// Reads and parses the file; throws zb::Error naming the file on any failure.
TransformerConfig config_from_hf_file(const std::string& path);

}  // namespace zb
