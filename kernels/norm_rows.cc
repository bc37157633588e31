#include "kernels/norm_rows.h"

#include "kernels/environment_choice.h"

namespace zb {

NormRows norm_rows_from_environment() {
  return choice_from_environment<NormRows>("ZB_NORM_ROWS", {{"teams", NormRows::teams}, {"warps", NormRows::warps}});
}

}  // namespace zb
