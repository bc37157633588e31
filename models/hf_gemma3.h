// Gemma 3's config.json: model_type gemma3_text (Gemma3ForCausalLM, e.g. google/gemma-3-1b-pt) and gemma3 (the
// multimodal Gemma3ForConditionalGeneration, of which the text model is read: its vision tower is not trained here).
// Fields a file leaves out take Gemma3TextConfig's defaults, as Hugging Face fills them in; a field that would make
// the model compute what the engine does not (logit soft-capping, attention biases or dropout, bidirectional
// attention, other activations or rotary scalings) is refused, naming it. Internal to the models library.
#pragma once

#include "models/hf_fields.h"
#include "models/transformer_config.h"

namespace zb::hf {

TransformerConfig gemma3_text_config(const Fields& fields);
// The wrapper: its text_config (Gemma3TextConfig's defaults where absent).
TransformerConfig gemma3_config(const Fields& fields);

}  // namespace zb::hf
