#include "bench/sweep_plan.h"

#include <algorithm>
#include <set>

#include "core/errors.h"

namespace zb {

namespace {

template <typename T>
void require_distinct(const std::vector<T>& values, const char* flag) {
  if (values.empty()) throw UsageError(std::string("--") + flag + ": name at least one value");
  std::set<T> seen;
  for (const T& v : values) {
    if (!seen.insert(v).second) {
      if constexpr (std::is_same_v<T, std::string>) {
        throw UsageError(std::string("--") + flag + ": '" + v + "' is named twice");
      } else {
        throw UsageError(std::string("--") + flag + ": " + std::to_string(v) + " is named twice");
      }
    }
  }
}

void require_positive(const std::vector<int64_t>& values, const char* flag, bool zero_allowed) {
  for (int64_t v : values) {
    if (v < 1 && !(zero_allowed && v == 0)) {
      throw UsageError(std::string("--") + flag + ": " + std::to_string(v) + " is not a size (at least 1" +
                       (zero_allowed ? "; 0: the model's default)" : ")"));
    }
  }
}

template <typename T>
std::vector<T> ascending(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  return values;
}

}  // namespace

std::string SweepPoint::kind() const {
  return model + "|" + dtype + "|" + optimizer + "|" + std::to_string(lora_rank) + "|" + std::to_string(stage) + "|" +
         strategy + "|" + checkpointing + "|" + std::to_string(grad_accum);
}

void validate(const SweepAxes& a) {
  require_distinct(a.models, "models");
  require_distinct(a.batch_sizes, "batch-sizes");
  require_positive(a.batch_sizes, "batch-sizes", false);
  require_distinct(a.seq_lengths, "seq-lengths");
  require_positive(a.seq_lengths, "seq-lengths", true);
  require_distinct(a.grad_accum, "grad-accum");
  require_positive(a.grad_accum, "grad-accum", false);
  require_distinct(a.optimizers, "optimizers");
  require_distinct(a.stages, "stages");
  require_distinct(a.strategies, "strategies");
  require_distinct(a.checkpointing, "activation-checkpointing");
  require_distinct(a.lora_ranks, "lora-rank");
  require_positive(a.lora_ranks, "lora-rank", true);
  require_distinct(a.dtypes, "dtype");
}

std::vector<SweepPoint> sweep_points(const SweepAxes& a) {
  validate(a);
  std::vector<SweepPoint> points;
  const std::vector<int64_t> seqs = ascending(a.seq_lengths), batches = ascending(a.batch_sizes);
  for (const std::string& model : a.models)
    for (const std::string& dtype : a.dtypes)
      for (const std::string& optimizer : a.optimizers)
        for (int64_t lora_rank : a.lora_ranks)
          for (int stage : a.stages)
            for (const std::string& strategy : a.strategies)
              for (const std::string& checkpointing : a.checkpointing)
                for (int64_t accum : a.grad_accum)
                  for (int64_t seq : seqs)
                    for (int64_t batch : batches)
                      points.push_back(
                          {model, dtype, optimizer, lora_rank, stage, strategy, checkpointing, accum, seq, batch});
  return points;
}

void OutOfMemoryRule::ran_out(const SweepPoint& point) { failed_.push_back(point); }

std::optional<std::string> OutOfMemoryRule::skip_reason(const SweepPoint& p) const {
  for (const SweepPoint& f : failed_) {
    const bool same_seq_or_larger = f.seq_length == p.seq_length || (f.seq_length > 0 && p.seq_length > f.seq_length);
    if (f.kind() == p.kind() && p.batch_size >= f.batch_size && same_seq_or_larger) {
      return "skipped: batch " + std::to_string(f.batch_size) +
             (f.seq_length > 0 ? " at seq " + std::to_string(f.seq_length) : std::string()) + " ran out";
    }
  }
  return std::nullopt;
}

size_t OutOfMemoryRule::ruled_out(const std::vector<SweepPoint>& points) const {
  return size_t(std::count_if(points.begin(), points.end(),
                              [&](const SweepPoint& p) { return skip_reason(p).has_value(); }));
}

void read_sweep_config(const nlohmann::json& config, const std::string& file, SweepAxes& axes,
                       std::optional<int64_t>& num_steps) {
  const auto refuse = [&](const std::string& why) { throw UsageError("--config " + file + ": " + why); };
  if (!config.is_object()) refuse("must be a JSON object of the sweep's axes");
  static const std::set<std::string> kKeys = {
      "models", "batch_sizes", "sequence_lengths", "accumulation_steps", "optimizers", "num_steps",
      "stages", "strategies", "activation_checkpointing", "lora_ranks", "dtypes"};
  std::string unknown;
  for (const auto& [key, value] : config.items())
    if (!kKeys.count(key)) unknown += (unknown.empty() ? "" : ", ") + key;
  if (!unknown.empty()) {
    std::string accepted;
    for (const std::string& k : kKeys) accepted += (accepted.empty() ? "" : ", ") + k;
    refuse("unknown key(s) " + unknown + " (accepted: " + accepted + ")");
  }
  const auto list = [&]<typename T>(const char* key, std::vector<T>& out) {
    if (!config.contains(key)) return;
    const nlohmann::json& v = config.at(key);
    if (!v.is_array()) refuse(std::string(key) + " must be a list");
    std::vector<T> values;
    for (const nlohmann::json& item : v) {
      const bool fits = std::is_same_v<T, std::string> ? item.is_string() : item.is_number_integer();
      if (!fits) refuse(std::string(key) + " holds " + item.dump() + std::string(", not ") +
                        (std::is_same_v<T, std::string> ? "a string" : "a whole number"));
      values.push_back(item.get<T>());
    }
    out = values;
  };
  list.operator()<std::string>("models", axes.models);
  list.operator()<int64_t>("batch_sizes", axes.batch_sizes);
  list.operator()<int64_t>("sequence_lengths", axes.seq_lengths);
  list.operator()<int64_t>("accumulation_steps", axes.grad_accum);
  list.operator()<std::string>("optimizers", axes.optimizers);
  list.operator()<int>("stages", axes.stages);
  list.operator()<std::string>("strategies", axes.strategies);
  list.operator()<std::string>("activation_checkpointing", axes.checkpointing);
  list.operator()<int64_t>("lora_ranks", axes.lora_ranks);
  list.operator()<std::string>("dtypes", axes.dtypes);
  if (config.contains("num_steps")) {
    const nlohmann::json& v = config.at("num_steps");
    if (!v.is_number_integer() || v.get<int64_t>() < 1) refuse("num_steps must be a whole number of at least 1");
    num_steps = v.get<int64_t>();
  }
}

}  // namespace zb
