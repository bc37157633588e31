// The GPU backend's implementation choices, in one table: each has a ZB_* environment variable, a fixed set of
// values and a default. The programs read the table once at start (a bad value is a usage error naming the
// variable), hand the result to the backend they build, list the table in --help and write the values into
// every result record, so that a result says how it was produced. The CPU backend has one implementation of
// each op and ignores them. ZB_LOG_LEVEL, the one other setting read from the environment, is in the table too.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/log.h"

namespace zb {

// Whose kernels run bf16 attention (fp32 always runs ours).
enum class AttentionKernels { cudnn, own };
// How a cuBLASLt algorithm is picked for each GEMM shape.
enum class GemmAlgorithms { timed, heuristic };
// Whether GELU and its derivative are applied in cuBLASLt's epilogues or by kernels of ours after the GEMM.
enum class GemmEpilogues { fused, kernels };
// How the LayerNorm and RMSNorm kernels spread a row over threads.
enum class NormRows { teams, warps };
// Whether a training pass may be recorded once and replayed (Backend::can_record).
enum class PassRecording { graphs, eager };

struct BackendOptions {
  AttentionKernels attention = AttentionKernels::cudnn;
  GemmAlgorithms gemm_algorithms = GemmAlgorithms::timed;
  GemmEpilogues gemm_epilogues = GemmEpilogues::fused;
  NormRows norm_rows = NormRows::teams;
  PassRecording pass_recording = PassRecording::graphs;
  LogLevel log_level = LogLevel::info;

  // The defaults, with each variable of the table that is set and not empty; UsageError naming the variable
  // and its accepted values for anything else.
  static BackendOptions from_environment();
  // (name, value) of every row, in the table's order: what a result record holds.
  std::vector<std::pair<std::string, std::string>> settings() const;
  // "attention=cudnn gemm_algorithms=timed ...": what train prints in its header.
  std::string summary() const;
  bool operator==(const BackendOptions&) const = default;
};

struct BackendOptionRow {
  std::string name;                 // the key in result records, e.g. "attention"
  std::string variable;             // e.g. "ZB_ATTENTION"
  std::vector<std::string> values;  // every accepted value
  std::string default_value;
  std::string meaning;  // what each value does, and what overrides it
};

// The table, in a fixed order.
const std::vector<BackendOptionRow>& backend_option_rows();
// The table as --help prints it, one entry a variable.
std::string backend_options_help();

}  // namespace zb
