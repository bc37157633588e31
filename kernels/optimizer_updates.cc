#include "kernels/optimizer_updates.h"

#include "kernels/environment_choice.h"

namespace zb {

OptimizerUpdates optimizer_updates_from_environment() {
  return choice_from_environment<OptimizerUpdates>(
      "ZB_OPTIMIZER_UPDATES", {{"aside", OptimizerUpdates::aside}, {"in_order", OptimizerUpdates::in_order}});
}

}  // namespace zb
