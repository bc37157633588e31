// offload_bench: the offload strategies compared on one model (see bench/comparison_program.h).
#include "bench/comparison_program.h"

int main(int argc, char** argv) {
  return zb::run_comparison(argc, argv, zb::ComparisonKind::offload_strategies);
}
