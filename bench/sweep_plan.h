// The configurations of a sweep (issue: the profiling matrix): the cross product of its axes in a fixed order,
// and which of them must run out of memory because a smaller one of the same kind did. A `sweep` program runs
// them on the comparison runner; this is the plan it follows, kept apart so that its rules are tested alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zb {

// Each axis a list of values; the sweep runs every combination. A value of 0 for the sequence length means the
// model's default; an empty dtype the device's default.
struct SweepAxes {
  std::vector<std::string> models{"gpt2"};
  std::vector<int64_t> batch_sizes{4}, seq_lengths{0}, grad_accum{1};
  std::vector<std::string> optimizers{"adamw"};
  std::vector<int> stages{0};
  std::vector<std::string> strategies{"none"};
  std::vector<std::string> checkpointing{"none"};
  std::vector<int64_t> lora_ranks{0};
  std::vector<std::string> dtypes{""};
};

// One configuration of the sweep.
struct SweepPoint {
  std::string model;
  std::string dtype;
  std::string optimizer;
  int64_t lora_rank = 0;
  int stage = 0;
  std::string strategy;
  std::string checkpointing;
  int64_t grad_accum = 1;
  int64_t seq_length = 0;
  int64_t batch_size = 0;
  // Everything but the batch and sequence sizes: points of one kind differ only in those, and one that is larger
  // in both needs at least the memory of a smaller one.
  std::string kind() const;
};

// Throws UsageError naming the axis's flag where an axis is empty, names a value twice, or holds a size below 1
// (a sequence length of 0 excepted: the model's default).
void validate(const SweepAxes& axes);

// The cross product in the order the sweep runs it: model, dtype, optimizer, LoRA rank, stage, strategy,
// checkpointing and accumulation as given (outermost first), then sequence length and batch size ascending
// (innermost): within a kind, every smaller configuration runs before a larger one, so that an out-of-memory
// failure is known before the configurations it rules out come up.
std::vector<SweepPoint> sweep_points(const SweepAxes& axes);

// The out-of-memory failures so far, and what they rule out: a point whose kind ran out at a batch and sequence
// length no larger than its own (one of them smaller or both equal) must run out too, as activations grow with
// both. The default sequence length (0) is compared as given: only with itself.
class OutOfMemoryRule {
 public:
  void ran_out(const SweepPoint& point);
  // "skipped: batch 16 at seq 1024 ran out" where the point is ruled out, nothing where it must run.
  std::optional<std::string> skip_reason(const SweepPoint& point) const;
  // How many of `points` the failures known so far rule out.
  size_t ruled_out(const std::vector<SweepPoint>& points) const;

 private:
  std::vector<SweepPoint> failed_;
};

// A profiling matrix's JSON config: its keys models, batch_sizes, sequence_lengths, accumulation_steps,
// optimizers, num_steps, and this program's stages, strategies, activation_checkpointing, lora_ranks, dtypes.
// `axes` gets every axis the file names (the others keep their values), `num_steps` the file's where it has one.
// Throws UsageError naming the file and the key: an unknown key (all of them listed), a value of the wrong type.
void read_sweep_config(const nlohmann::json& config, const std::string& file, SweepAxes& axes,
                       std::optional<int64_t>& num_steps);

}  // namespace zb
