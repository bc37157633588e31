// The body of zero_bench and offload_bench: parse and validate the flags, run every configuration in this
// MPI job, write the results (rank 0), print the summary, and in regression mode compare with the baseline.
// Exit codes: 0 done; 1 a regression beyond --max-regression (or a failure of the program itself); 2 bad
// input, before any training; 130 stopped by Ctrl-C (what had finished is written).
#pragma once

#include "bench/comparison_cli.h"

namespace zb {

int run_comparison(int argc, char** argv, ComparisonKind kind);

}  // namespace zb
