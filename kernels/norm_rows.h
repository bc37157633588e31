// How the GPU backend's LayerNorm and RMSNorm kernels spread a row: `teams`, a team of threads holding one or
// two 8-column vectors each of it in registers, the row read once (kernels/cuda/norm_row_teams.cuh); `warps`,
// one warp a row walking its columns in two or three passes. The environment variable ZB_NORM_ROWS picks;
// teams by default, where the row fits a team (c % 8 == 0, 16-byte aligned rows, at most 4096 columns), warps
// elsewhere. docs/PERFORMANCE.md has what each measured.
#pragma once

namespace zb {

enum class NormRows { teams, warps };

// ZB_NORM_ROWS's value, or teams when it is unset or empty; UsageError naming the variable otherwise.
NormRows norm_rows_from_environment();

}  // namespace zb
