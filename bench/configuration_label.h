// How the programs name a configuration in tables, charts and heatmaps.
#pragma once

#include <string>

namespace zb {

// "stage 2" without offload, "cpu_optimizer (stage 2)" with it (and "none (stage 2)" with names_strategy); with
// activation checkpointing, "stage 2, full ckpt" and "cpu_optimizer (stage 2), selective ckpt".
std::string configuration_label(int stage, const std::string& strategy, bool names_strategy = false,
                                const std::string& checkpointing = "none");

}  // namespace zb
