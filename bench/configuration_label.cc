#include "bench/configuration_label.h"

namespace zb {

std::string configuration_label(int stage, const std::string& strategy, bool names_strategy,
                                const std::string& checkpointing) {
  std::string label = strategy == "none" && !names_strategy ? "stage " + std::to_string(stage)
                                                            : strategy + " (stage " + std::to_string(stage) + ")";
  if (checkpointing != "none") label += ", " + checkpointing + " ckpt";
  return label;
}

}  // namespace zb
