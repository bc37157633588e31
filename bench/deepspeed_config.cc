// Reading the benchmarks' settings out of a DeepSpeed config, and writing a recommended setup back in the form
// DeepSpeed's own config classes validate (deepspeed/runtime/zero/config.py and offload_config.py forbid
// unknown keys in the ZeRO section; the aio section is read key by key).
#include "bench/deepspeed_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

namespace {

using nlohmann::json;

// How a refused value is quoted: short values as JSON, so that a string shows its quotes and 5e8 its form.
std::string shown(const json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// An integer written either as one or as an integral float: DeepSpeed's configs spell sizes as 5e8, and its
// pydantic models take such floats for their int fields.
std::optional<int64_t> as_integer(const json& value) {
  if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return int64_t(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // 2^63 itself is out of range, and every double below it that is integral converts exactly.
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2233720368547758e18) return int64_t(d);
  }
  return std::nullopt;
}

// The reading of one config. Each refusal names the source and the key's dotted path, so that the person
// running a benchmark can find the line to change.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    throw UsageError(cat(source_, ": ", key, ": ", what));
  }

  // The value of `name`, or null where it is absent, null or "auto": the Hugging Face integration writes
  // "auto" for values it fills in itself, and DeepSpeed's config models drop such keys.
  static const json* find(const json& object, const std::string& name) {
    const auto it = object.find(name);
    if (it == object.end() || it->is_null() || (it->is_string() && it->get<std::string>() == "auto")) return nullptr;
    return &*it;
  }

  const json* section(const json& object, const std::string& name, const std::string& path) const {
    const json* value = find(object, name);
    if (value && !value->is_object()) fail(path, cat("must be an object, got ", shown(*value)));
    return value;
  }

  std::optional<int64_t> integer(const json& object, const std::string& name, const std::string& path, int64_t min,
                                 int64_t max, std::string_view accepted) const {
    const json* value = find(object, name);
    if (!value) return std::nullopt;
    const auto n = as_integer(*value);
    if (!n || *n < min || *n > max) fail(path, cat("must be ", accepted, ", got ", shown(*value)));
    return n;
  }

  std::optional<int64_t> positive(const json& object, const std::string& name, const std::string& path) const {
    return integer(object, name, path, 1, std::numeric_limits<int64_t>::max(), "a positive integer");
  }

  std::optional<int64_t> non_negative(const json& object, const std::string& name, const std::string& path) const {
    return integer(object, name, path, 0, std::numeric_limits<int64_t>::max(), "a non-negative integer");
  }

  std::optional<int> positive_int(const json& object, const std::string& name, const std::string& path) const {
    const auto n = integer(object, name, path, 1, std::numeric_limits<int>::max(), "a positive integer");
    return n ? std::optional<int>(int(*n)) : std::nullopt;
  }

  std::optional<double> number(const json& object, const std::string& name, const std::string& path,
                               bool zero_allowed) const {
    const json* value = find(object, name);
    if (!value) return std::nullopt;
    const double d = value->is_number() ? value->get<double>() : -1;
    if (!value->is_number() || !std::isfinite(d) || d < 0 || (d == 0 && !zero_allowed))
      fail(path, cat("must be a ", zero_allowed ? "non-negative" : "positive", " number, got ", shown(*value)));
    return d;
  }

  std::optional<bool> boolean(const json& object, const std::string& name, const std::string& path) const {
    const json* value = find(object, name);
    if (!value) return std::nullopt;
    if (!value->is_boolean()) fail(path, cat("must be true or false, got ", shown(*value)));
    return value->get<bool>();
  }

  std::optional<std::string> string(const json& object, const std::string& name, const std::string& path,
                                    std::string_view accepted) const {
    const json* value = find(object, name);
    if (!value) return std::nullopt;
    if (!value->is_string() || value->get<std::string>().empty())
      fail(path, cat("must be ", accepted, ", got ", shown(*value)));
    return value->get<std::string>();
  }

 private:
  std::string source_;
};

struct Offload {
  std::optional<std::string> device;
  std::optional<std::string> nvme_path;  // only where device is "nvme"
  std::optional<double> ratio;           // offload_optimizer's only
};

Offload read_offload(const Reader& r, const json& zero, const std::string& name) {
  const std::string path = "zero_optimization." + name;
  Offload offload;
  const json* section = r.section(zero, name, path);
  if (!section) return offload;
  // A section without a device is DeepSpeed's default device, "none".
  offload.device = r.string(*section, "device", path + ".device", "\"none\", \"cpu\" or \"nvme\"").value_or("none");
  if (*offload.device != "none" && *offload.device != "cpu" && *offload.device != "nvme")
    r.fail(path + ".device", cat("must be \"none\", \"cpu\" or \"nvme\", got \"", *offload.device, "\""));
  if (*offload.device == "nvme") {
    offload.nvme_path = r.string(*section, "nvme_path", path + ".nvme_path", "a folder (a non-empty string)");
    // DeepSpeed's model takes the config without it, then fails when the swapper opens its files.
    if (!offload.nvme_path) r.fail(path + ".nvme_path", "required when the device is \"nvme\"");
  }
  if (name == "offload_optimizer") {
    offload.ratio = r.number(*section, "ratio", path + ".ratio", /*zero_allowed=*/false);
    if (offload.ratio && *offload.ratio > 1) r.fail(path + ".ratio", cat("must be in (0, 1], got ", *offload.ratio));
  }
  return offload;
}

void read_zero(const Reader& r, const json& root, DeepSpeedConfig& c) {
  const auto it = root.find("zero_optimization");
  if (it != root.end() && it->is_boolean()) {
    c.stage = it->get<bool>() ? 1 : 0;  // DeepSpeed's oldest form: true meant stage 1
    return;
  }
  const json* zero = r.section(root, "zero_optimization", "zero_optimization");
  if (!zero) return;
  const auto stage = r.integer(*zero, "stage", "zero_optimization.stage", 0, 3, "0, 1, 2 or 3");
  if (stage) c.stage = int(*stage);

  Offload optimizer = read_offload(r, *zero, "offload_optimizer");
  Offload param = read_offload(r, *zero, "offload_param");
  // The deprecated booleans that DeepSpeed still maps onto the two sections.
  if (!optimizer.device && r.boolean(*zero, "cpu_offload", "zero_optimization.cpu_offload").value_or(false))
    optimizer.device = "cpu";
  if (!param.device && r.boolean(*zero, "cpu_offload_param", "zero_optimization.cpu_offload_param").value_or(false))
    param.device = "cpu";
  c.offload_optimizer = optimizer.device;
  c.offload_ratio = optimizer.ratio;
  c.offload_param = param.device;
  if (optimizer.nvme_path && param.nvme_path && *optimizer.nvme_path != *param.nvme_path)
    r.fail("zero_optimization.offload_param.nvme_path",
           cat("\"", *param.nvme_path, "\" differs from offload_optimizer.nvme_path \"", *optimizer.nvme_path,
               "\"; the benchmarks use one NVMe folder for both"));
  c.nvme_path = optimizer.nvme_path ? optimizer.nvme_path : param.nvme_path;

  // Refused here rather than passed on: DeepSpeed ignores a parameter offload below stage 3 and breaks on an
  // optimizer offload at stage 0, and either way the run would not be the one the file asks for.
  const int effective_stage = c.stage.value_or(0);
  const std::string stage_text = c.stage ? cat("stage ", *c.stage) : std::string("no stage (DeepSpeed's default, 0)");
  if (c.offload_optimizer.value_or("none") != "none" && effective_stage < 1)
    r.fail("zero_optimization.offload_optimizer", cat("optimizer offload needs stage 1, 2 or 3, got ", stage_text));
  if (c.offload_param.value_or("none") != "none" && effective_stage < 3)
    r.fail("zero_optimization.offload_param", cat("parameter offload needs stage 3, got ", stage_text));

  c.reduce_bucket_size = r.non_negative(*zero, "reduce_bucket_size", "zero_optimization.reduce_bucket_size");
  c.allgather_bucket_size = r.non_negative(*zero, "allgather_bucket_size", "zero_optimization.allgather_bucket_size");
  c.stage3_prefetch_bucket_size =
      r.non_negative(*zero, "stage3_prefetch_bucket_size", "zero_optimization.stage3_prefetch_bucket_size");
  c.stage3_param_persistence_threshold = r.non_negative(*zero, "stage3_param_persistence_threshold",
                                                        "zero_optimization.stage3_param_persistence_threshold");
  c.overlap_comm = r.boolean(*zero, "overlap_comm", "zero_optimization.overlap_comm");
}

void read_precision(const Reader& r, const json& root, DeepSpeedConfig& c) {
  // "bfloat16" is the older name DeepSpeed still reads where "bf16" is absent.
  const std::string bf16_key = root.contains("bf16") ? "bf16" : "bfloat16";
  std::optional<bool> bf16, fp16;
  if (const json* s = r.section(root, bf16_key, bf16_key)) bf16 = r.boolean(*s, "enabled", bf16_key + ".enabled");
  if (const json* s = r.section(root, "fp16", "fp16")) fp16 = r.boolean(*s, "enabled", "fp16.enabled");
  if (bf16.value_or(false) && fp16.value_or(false))
    r.fail(bf16_key + ".enabled and fp16.enabled", "cannot both be true");
  if (bf16.value_or(false)) {
    c.precision = "bf16";
  } else if (fp16.value_or(false)) {
    c.precision = "fp16";
    const json& s = *r.section(root, "fp16", "fp16");
    c.loss_scale = r.number(s, "loss_scale", "fp16.loss_scale", /*zero_allowed=*/true);
    if (const auto power = r.integer(s, "initial_scale_power", "fp16.initial_scale_power", 0, 127,
                                     "an integer in [0, 127]")) {
      c.initial_scale_power = int(*power);
    }
    c.loss_scale_window = r.positive(s, "loss_scale_window", "fp16.loss_scale_window");
    c.hysteresis = r.positive_int(s, "hysteresis", "fp16.hysteresis");
    c.min_loss_scale = r.number(s, "min_loss_scale", "fp16.min_loss_scale", /*zero_allowed=*/false);
  } else if (bf16 || fp16) {
    c.precision = "fp32";
  }
}

void read_optimizer(const Reader& r, const json& root, DeepSpeedConfig& c) {
  const json* optimizer = r.section(root, "optimizer", "optimizer");
  if (!optimizer) return;
  // Without a type DeepSpeed builds no optimizer and ignores the params, so they are left unread here too.
  const auto type = r.string(*optimizer, "type", "optimizer.type", "Adam, AdamW or SGD");
  if (!type) return;
  std::string lower = *type;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  const json* params = r.section(*optimizer, "params", "optimizer.params");
  if (lower == "adamw") {
    c.optimizer = "adamw";
  } else if (lower == "adam") {
    const auto adam_w_mode = params ? r.boolean(*params, "adam_w_mode", "optimizer.params.adam_w_mode") : std::nullopt;
    c.optimizer = adam_w_mode.value_or(true) ? "adamw" : "adam";
  } else if (*type == "SGD") {
    c.optimizer = "sgd";
  } else if (lower == "sgd") {
    // DeepSpeed lower-cases only the names of its own optimizers; any other it looks up in torch.optim as written.
    r.fail("optimizer.type", cat("DeepSpeed finds SGD in torch.optim only as \"SGD\", got \"", *type, "\""));
  } else {
    r.fail("optimizer.type", cat("must be Adam, AdamW or SGD, got \"", *type, "\""));
  }
  if (!params) return;
  if (params->contains("max_grad_norm"))
    r.fail("optimizer.params.max_grad_norm", "DeepSpeed refuses it; use the top-level gradient_clipping");
  c.lr = r.number(*params, "lr", "optimizer.params.lr", false);
  c.weight_decay = r.number(*params, "weight_decay", "optimizer.params.weight_decay", true);
}

void read_activation_checkpointing(const Reader& r, const json& root, DeepSpeedConfig& c) {
  const json* section = r.section(root, "activation_checkpointing", "activation_checkpointing");
  if (!section) return;
  // Checked for their type; without model parallelism none of them changes what is kept.
  for (const char* key :
       {"partition_activations", "contiguous_memory_optimization", "synchronize_checkpoint_boundary", "profile"})
    r.boolean(*section, key, cat("activation_checkpointing.", key));
  if (r.boolean(*section, "cpu_checkpointing", "activation_checkpointing.cpu_checkpointing").value_or(false)) {
    r.fail("activation_checkpointing.cpu_checkpointing",
           "keeping the checkpoints in host memory is not supported; set it to false (the checkpoints stay on the GPU)");
  }
  c.activation_checkpointing = "full";
}

void read_aio(const Reader& r, const json& root, DeepSpeedConfig& c) {
  const json* aio = r.section(root, "aio", "aio");
  if (!aio) return;
  c.aio_block_size = r.positive(*aio, "block_size", "aio.block_size");
  c.aio_queue_depth = r.positive_int(*aio, "queue_depth", "aio.queue_depth");
  // thread_count is the older name of intra_op_parallelism; where both are given, current DeepSpeed takes the new one.
  c.aio_intra_op_parallelism = r.positive_int(*aio, "intra_op_parallelism", "aio.intra_op_parallelism");
  if (!c.aio_intra_op_parallelism)
    c.aio_intra_op_parallelism = r.positive_int(*aio, "thread_count", "aio.thread_count");
  c.aio_single_submit = r.boolean(*aio, "single_submit", "aio.single_submit");
  c.aio_overlap_events = r.boolean(*aio, "overlap_events", "aio.overlap_events");
}

// The library's own checks of what it is asked to write: a config DeepSpeed would refuse is a caller's bug.
void require(bool condition, std::string_view what) {
  if (!condition) throw Error(cat("deepspeed_config_json: ", what));
}

// section[key] = *value where the value is given, after requiring it positive (`name` in the message).
template <typename Int>
void put_positive(json& section, const char* key, const std::optional<Int>& value, std::string_view name) {
  if (!value) return;
  require(*value > 0, cat(name, " must be positive"));
  section[key] = *value;
}

json offload_json(const std::string& device, const std::optional<std::string>& nvme_path, std::string_view name,
                  const std::optional<double>& ratio = std::nullopt) {
  require(device == "none" || device == "cpu" || device == "nvme",
          cat(name, " must be \"none\", \"cpu\" or \"nvme\", got \"", device, "\""));
  json section = {{"device", device}};
  if (device == "none") return section;
  section["pin_memory"] = true;
  if (ratio) {
    require(*ratio > 0 && *ratio <= 1, cat(name, " ratio must be in (0, 1], got ", *ratio));
    if (*ratio < 1) section["ratio"] = *ratio;
  }
  if (device == "nvme") {
    require(nvme_path && !nvme_path->empty(), cat(name, " \"nvme\" needs nvme_path"));
    section["nvme_path"] = *nvme_path;
  }
  return section;
}

}  // namespace

DeepSpeedConfig parse_deepspeed_config(const nlohmann::json& json, const std::string& source) {
  const Reader r(source);
  if (!json.is_object())
    throw UsageError(cat(source, ": must be a JSON object (a DeepSpeed config), got ", shown(json)));
  DeepSpeedConfig c;
  c.micro_batch = r.positive(json, "train_micro_batch_size_per_gpu", "train_micro_batch_size_per_gpu");
  c.grad_accum = r.positive(json, "gradient_accumulation_steps", "gradient_accumulation_steps");
  c.train_batch = r.positive(json, "train_batch_size", "train_batch_size");
  // (Whether they agree depends on the GPU count: deepspeed_batch, which the caller that knows it applies.)
  c.gradient_clipping = r.number(json, "gradient_clipping", "gradient_clipping", true);
  read_precision(r, json, c);
  read_zero(r, json, c);
  read_optimizer(r, json, c);
  read_aio(r, json, c);
  read_activation_checkpointing(r, json, c);
  return c;
}

DeepSpeedConfig read_deepspeed_config(const std::string& path) {
  const std::string source = "--config " + path;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) throw UsageError(cat(source, ": no such file"));
  if (std::filesystem::is_directory(path, error)) throw UsageError(cat(source, ": is a folder, not a file"));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in) throw UsageError(cat(source, ": cannot be read: ", std::strerror(errno)));

  // DeepSpeed refuses a key given twice in one object (it would otherwise keep the last silently); the parser
  // callback sees each object's keys in turn.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  const json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      keys.pop_back();
    } else if (event == json::parse_event_t::key && !keys.back().insert(parsed.get<std::string>()).second &&
               duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json parsed;
  try {
    parsed = json::parse(text.str(), callback, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    // what() starts with the library's "[json.exception.parse_error.N] ", no help to the reader of the message.
    std::string what = e.what();
    if (const auto end = what.find("] "); end != std::string::npos) what.erase(0, end + 2);
    throw UsageError(cat(source, ": not valid JSON: ", what));
  }
  if (!duplicate.empty()) throw UsageError(cat(source, ": ", duplicate, ": given twice in one object"));
  return parse_deepspeed_config(parsed, source);
}

std::optional<DeepSpeedBatch> deepspeed_batch(const DeepSpeedConfig& c, int world, const std::string& source) {
  if (!c.train_batch && !c.micro_batch && !c.grad_accum) return std::nullopt;
  const auto fail = [&](const std::string& what) {
    throw UsageError(cat(source, ": train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps ",
                         "must satisfy train_batch_size = micro-batch x accumulation x GPUs (", world, " here): ", what));
  };
  DeepSpeedBatch b;
  if (c.train_batch && c.micro_batch && c.grad_accum) {
    b = {*c.micro_batch, *c.grad_accum};
    if (*c.train_batch != b.micro_batch * b.grad_accum * world)
      fail(cat(*c.train_batch, " != ", b.micro_batch, " x ", b.grad_accum, " x ", world));
  } else if (c.train_batch && c.micro_batch) {
    if (*c.train_batch % (*c.micro_batch * world) != 0)
      fail(cat("train_batch_size ", *c.train_batch, " is not a multiple of ", *c.micro_batch, " x ", world));
    b = {*c.micro_batch, *c.train_batch / (*c.micro_batch * world)};
  } else if (c.train_batch) {
    const int64_t accum = c.grad_accum.value_or(1);
    if (*c.train_batch % (accum * world) != 0)
      fail(cat("train_batch_size ", *c.train_batch, " is not a multiple of ", accum, " x ", world));
    b = {*c.train_batch / (accum * world), accum};
  } else if (c.micro_batch) {
    b = {*c.micro_batch, c.grad_accum.value_or(1)};
  } else {
    throw UsageError(cat(source, ": gradient_accumulation_steps alone: DeepSpeed needs train_batch_size or ",
                         "train_micro_batch_size_per_gpu beside it"));
  }
  return b;
}

nlohmann::json deepspeed_config_json(const DeepSpeedConfig& c) {
  json out = json::object();
  // DeepSpeed needs train_micro_batch_size_per_gpu or train_batch_size, and checks that the global batch is
  // micro * accumulation * world size: with a micro-batch it derives the global batch itself.
  require(c.micro_batch || c.train_batch, "needs micro_batch or train_batch: DeepSpeed refuses a config without");
  if (c.micro_batch) {
    put_positive(out, "train_micro_batch_size_per_gpu", c.micro_batch, "micro_batch");
  } else {
    put_positive(out, "train_batch_size", c.train_batch, "train_batch");
  }
  put_positive(out, "gradient_accumulation_steps", c.grad_accum, "grad_accum");
  if (c.gradient_clipping) {
    require(*c.gradient_clipping >= 0, "gradient_clipping must be non-negative");
    out["gradient_clipping"] = *c.gradient_clipping;
  }
  if (c.precision) {
    const std::string& p = *c.precision;
    require(p == "bf16" || p == "fp16" || p == "fp32", cat("precision must be bf16, fp16 or fp32, got \"", p, "\""));
    out["bf16"] = {{"enabled", p == "bf16"}};
    out["fp16"] = {{"enabled", p == "fp16"}};
    if (p == "fp16") {
      json& fp16 = out["fp16"];
      if (c.loss_scale) fp16["loss_scale"] = *c.loss_scale;
      if (c.initial_scale_power) fp16["initial_scale_power"] = *c.initial_scale_power;
      if (c.loss_scale_window) fp16["loss_scale_window"] = *c.loss_scale_window;
      if (c.hysteresis) fp16["hysteresis"] = *c.hysteresis;
      // DeepSpeed's documentation types min_loss_scale an integer (and releases before its validators refuse
      // a fraction): a whole number is written as one.
      if (c.min_loss_scale) {
        const double m = *c.min_loss_scale;
        fp16["min_loss_scale"] = m == std::floor(m) && m < 1e15 ? json(int64_t(m)) : json(m);
      }
    }
  }

  const int stage = c.stage.value_or(0);
  require(stage >= 0 && stage <= 3, cat("stage must be 0 to 3, got ", stage));

  if (c.optimizer) {
    const std::string& o = *c.optimizer;
    json optimizer;
    json params = json::object();
    if (o == "adamw") {
      optimizer["type"] = "AdamW";
    } else if (o == "adam") {
      optimizer["type"] = "Adam";
      params["adam_w_mode"] = false;  // DeepSpeed's Adam is AdamW unless told otherwise
    } else {
      require(o == "sgd", cat("optimizer must be adamw, adam or sgd, got \"", o, "\""));
      optimizer["type"] = "SGD";  // looked up in torch.optim as written
      // ZeRO runs optimizers outside its tested list (torch's Adam/AdamW, its own fused and CPU ones) only
      // when allowed.
      if (stage >= 1) out["zero_allow_untested_optimizer"] = true;
    }
    if (c.lr) params["lr"] = *c.lr;
    if (c.weight_decay) params["weight_decay"] = *c.weight_decay;
    if (!params.empty()) optimizer["params"] = params;
    out["optimizer"] = optimizer;
  }

  // Only fields of DeepSpeedZeroConfig: it forbids any other key.
  json zero = json::object();
  if (c.stage) zero["stage"] = *c.stage;
  require(!c.offload_ratio || *c.offload_ratio >= 1 || stage == 3,
          cat("offload_optimizer.ratio ", c.offload_ratio.value_or(1), " at stage ", stage,
              ": DeepSpeed offloads a part of the optimizer state in stage 3 only"));
  if (c.offload_optimizer && stage >= 1)
    zero["offload_optimizer"] = offload_json(*c.offload_optimizer, c.nvme_path, "offload_optimizer", c.offload_ratio);
  if (c.offload_param && stage == 3)
    zero["offload_param"] = offload_json(*c.offload_param, c.nvme_path, "offload_param");
  const std::pair<const char*, const std::optional<int64_t>*> sizes[] = {
      {"reduce_bucket_size", &c.reduce_bucket_size},
      {"allgather_bucket_size", &c.allgather_bucket_size},
      {"stage3_prefetch_bucket_size", stage == 3 ? &c.stage3_prefetch_bucket_size : nullptr},
      {"stage3_param_persistence_threshold", stage == 3 ? &c.stage3_param_persistence_threshold : nullptr},
  };
  for (const auto& [key, value] : sizes) {
    if (!value || !*value) continue;
    require(**value >= 0, cat(key, " must be non-negative"));
    zero[key] = **value;
  }
  if (c.overlap_comm) zero["overlap_comm"] = *c.overlap_comm;
  if (!zero.empty()) out["zero_optimization"] = zero;

  json aio = json::object();
  put_positive(aio, "block_size", c.aio_block_size, "aio_block_size");
  put_positive(aio, "queue_depth", c.aio_queue_depth, "aio_queue_depth");
  // Both names, equal: older DeepSpeed releases read only thread_count, newer ones intra_op_parallelism, and
  // the aio section is read key by key (no model forbids extra keys), so a release passes over the other name.
  put_positive(aio, "intra_op_parallelism", c.aio_intra_op_parallelism, "aio_intra_op_parallelism");
  put_positive(aio, "thread_count", c.aio_intra_op_parallelism, "aio_intra_op_parallelism");
  if (c.aio_single_submit) aio["single_submit"] = *c.aio_single_submit;
  if (c.aio_overlap_events) aio["overlap_events"] = *c.aio_overlap_events;
  if (!aio.empty()) out["aio"] = aio;

  if (c.activation_checkpointing && *c.activation_checkpointing != "none") {
    const std::string& mode = *c.activation_checkpointing;
    require(mode == "full" || mode == "selective",
            cat("activation_checkpointing must be none, full or selective, got \"", mode, "\""));
    out["activation_checkpointing"] = {{"partition_activations", false},
                                       {"cpu_checkpointing", false},
                                       {"contiguous_memory_optimization", false},
                                       {"synchronize_checkpoint_boundary", false}};
  }
  return out;
}

}  // namespace zb
