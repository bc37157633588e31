#include "kernels/backend_options.h"

#include <cstdlib>
#include <functional>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

namespace {

// A row with the accessors that read and write its member (an enum whose values are numbered as `values`).
struct Entry {
  BackendOptionRow row;
  std::function<size_t(const BackendOptions&)> get;
  std::function<void(BackendOptions&, size_t)> set;
};

template <typename Choice>
Entry entry(Choice BackendOptions::*member, std::string name, std::string variable, std::vector<std::string> values,
            std::string meaning) {
  const std::string default_value = values.at(size_t(BackendOptions{}.*member));
  return {{std::move(name), std::move(variable), std::move(values), default_value, std::move(meaning)},
          [member](const BackendOptions& o) { return size_t(o.*member); },
          [member](BackendOptions& o, size_t index) { o.*member = Choice(index); }};
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      entry(&BackendOptions::attention, "attention", "ZB_ATTENTION", {"cudnn", "own"},
            "bf16 attention: cuDNN's fused flash-attention graphs where the installed cuDNN builds them for the "
            "shape (ours elsewhere), or ours everywhere. Ours are deterministic (the same bits every run); "
            "cuDNN's backward adds dQ with atomics."),
      entry(&BackendOptions::gemm_algorithms, "gemm_algorithms", "ZB_GEMM_ALGORITHMS", {"timed", "heuristic"},
            "timed: a GEMM shape's first use times cuBLASLt's first candidates and keeps the fastest for the "
            "process; heuristic: cuBLASLt's first pick, the same in every process."),
      entry(&BackendOptions::gemm_epilogues, "gemm_epilogues", "ZB_GEMM_EPILOGUES", {"fused", "kernels"},
            "fused: GPT-2's GELU and its derivative applied in cuBLASLt's epilogues where cuBLASLt offers them for "
            "the shape; kernels: plain GEMMs followed by our GELU kernels."),
      entry(&BackendOptions::norm_rows, "norm_rows", "ZB_NORM_ROWS", {"teams", "warps"},
            "teams: a LayerNorm or RMSNorm row held in registers by a team of threads where it fits (columns a "
            "multiple of 8, at most 4096), one warp a row elsewhere; warps: one warp a row everywhere."),
      entry(&BackendOptions::pass_recording, "pass_recording", "ZB_PASS_RECORDING", {"graphs", "eager"},
            "graphs: each kind of micro-batch pass is recorded once as a CUDA graph and replayed where the pass "
            "neither communicates nor waits for the host (one GPU without offload); the optimizer's update then "
            "runs after the backward instead of beside the next forward. eager: every launch issued every pass."),
      entry(&BackendOptions::log_level, "log_level", "ZB_LOG_LEVEL", {"debug", "info", "warn", "error"},
            "messages below this level are not written (to standard error)."),
  };
  return table;
}

}  // namespace

BackendOptions BackendOptions::from_environment() {
  BackendOptions options;
  for (const Entry& e : entries()) {
    const char* set = std::getenv(e.row.variable.c_str());
    const std::string text = set ? set : "";
    if (text.empty()) continue;
    size_t index = 0;
    while (index < e.row.values.size() && e.row.values[index] != text) ++index;
    if (index == e.row.values.size()) {
      throw UsageError(cat(e.row.variable, "=", text, ": accepted values are ", join(e.row.values, ", "), " (default ",
                           e.row.default_value, ")"));
    }
    e.set(options, index);
  }
  return options;
}

std::vector<std::pair<std::string, std::string>> BackendOptions::settings() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Entry& e : entries()) out.emplace_back(e.row.name, e.row.values.at(e.get(*this)));
  return out;
}

std::string BackendOptions::summary() const {
  std::vector<std::string> parts;
  for (const auto& [name, value] : settings()) parts.push_back(name + "=" + value);
  return join(parts, " ");
}

const std::vector<BackendOptionRow>& backend_option_rows() {
  static const std::vector<BackendOptionRow> rows = [] {
    std::vector<BackendOptionRow> out;
    for (const Entry& e : entries()) out.push_back(e.row);
    return out;
  }();
  return rows;
}

std::string backend_options_help() {
  std::string text = "Backend options (environment variables, read once at start; every result records them):\n";
  for (const BackendOptionRow& row : backend_option_rows()) {
    text += cat("  ", row.variable, "=", join(row.values, "|"), " (default ", row.default_value, ")\n");
    // The meaning in lines of at most 80 columns (as the flags above), indented under the variable.
    std::string line = "     ";
    size_t start = 0;
    while (start < row.meaning.size()) {
      size_t end = row.meaning.find(' ', start);
      if (end == std::string::npos) end = row.meaning.size();
      const std::string word = row.meaning.substr(start, end - start);
      if (line.size() + 1 + word.size() > 80) {
        text += line + "\n";
        line = "     ";
      }
      line += " " + word;
      start = end + 1;
    }
    text += line + "\n";
  }
  return text;
}

}  // namespace zb
