// What DeepSpeed accepts of a config (0.19: deepspeed/runtime/config.py, zero/config.py, zero/offload_config.py),
// for the tests of the configs this project writes: the keys of the sections it validates, and the rules it
// enforces when it loads one.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace zb::test {

using nlohmann::json;

// The keys of DeepSpeed's ZeRO section, from DeepSpeedZeroConfig (deepspeed/runtime/zero/config.py, the
// stage3_* names being the aliases it documents); its pydantic base forbids any other key.
inline const std::set<std::string> kZeroKeys = {
    "stage",
    "contiguous_gradients",
    "reduce_scatter",
    "reduce_bucket_size",
    "use_multi_rank_bucket_allreduce",
    "allgather_partitions",
    "allgather_bucket_size",
    "overlap_comm",
    "load_from_fp32_weights",
    "elastic_checkpoint",
    "offload_param",
    "offload_optimizer",
    "sub_group_size",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_model_persistence_threshold",
    "stage3_max_live_parameters",
    "stage3_max_reuse_distance",
    "stage3_gather_16bit_weights_on_model_save",
    "ignore_unused_parameters",
    "round_robin_gradients",
    "zero_hpz_partition_size",
    "zero_quantized_weights",
    "zero_quantized_gradients",
    "mics_shard_size",
};
// DeepSpeedZeroOffloadParamConfig and DeepSpeedZeroOffloadOptimizerConfig (offload_config.py).
inline const std::set<std::string> kOffloadParamKeys = {"device",      "nvme_path",  "buffer_count",
                                                 "buffer_size", "max_in_cpu", "pin_memory"};
inline const std::set<std::string> kOffloadOptimizerKeys = {"device",        "nvme_path",      "buffer_count", "pin_memory",
                                                     "pipeline_read", "pipeline_write", "fast_init",    "ratio"};
// The aio section (deepspeed/runtime/swap_tensor/constants.py; thread_count before intra_op_parallelism).
inline const std::set<std::string> kAioKeys = {
    "block_size", "queue_depth", "intra_op_parallelism", "thread_count", "single_submit", "overlap_events", "use_gds"};
// Top-level keys of deepspeed/runtime/constants.py that the writer may use.
inline const std::set<std::string> kTopLevelKeys = {"train_batch_size",
                                             "train_micro_batch_size_per_gpu",
                                             "gradient_accumulation_steps",
                                             "gradient_clipping",
                                             "bf16",
                                             "fp16",
                                             "optimizer",
                                             "zero_optimization",
                                             "zero_allow_untested_optimizer",
                                             "aio",
                                             "activation_checkpointing"};
// DeepSpeed's fp16 section (deepspeed/runtime/precision_config.py), and those of its keys that are integers.
inline const std::set<std::string> kFp16Keys = {"enabled",           "auto_cast",      "loss_scale",
                                                "initial_scale_power", "loss_scale_window", "hysteresis",
                                                "consecutive_hysteresis", "min_loss_scale",
                                                "fp16_master_weights_and_grads"};
inline const std::set<std::string> kFp16IntegerKeys = {"initial_scale_power", "loss_scale_window", "hysteresis",
                                                       "min_loss_scale"};  // (documented as an integer)
// DeepSpeed's activation_checkpointing section (deepspeed/runtime/activation_checkpointing/config.py).
inline const std::set<std::string> kActivationCheckpointingKeys = {
    "partition_activations",           "contiguous_memory_optimization", "cpu_checkpointing", "number_checkpoints",
    "synchronize_checkpoint_boundary", "profile"};

inline void expect_keys_within(const json& object, const std::set<std::string>& known, const std::string& where) {
  ASSERT_TRUE(object.is_object()) << where << ": " << object.dump();
  for (const auto& [key, value] : object.items())
    EXPECT_TRUE(known.contains(key)) << where << " holds \"" << key << "\", which DeepSpeed does not know";
}

// The rules DeepSpeed enforces on loading `config` for `world` GPUs: the batch arithmetic (train_batch_size =
// micro-batch x accumulation x world, one of the first two given), at most one of bf16 and fp16 enabled,
// optimizer offload from stage 1 and parameter offload and a partial optimizer offload (ratio below 1) in stage
// 3 only, an nvme_path with each "nvme" device, and no key outside the sections' known ones.
inline void expect_deepspeed_accepts(const json& config, int world, const std::string& where) {
  SCOPED_TRACE(where + ": " + config.dump());
  expect_keys_within(config, kTopLevelKeys, "the config");
  const bool train = config.contains("train_batch_size"), micro = config.contains("train_micro_batch_size_per_gpu");
  EXPECT_TRUE(train || micro) << "DeepSpeed needs train_batch_size or train_micro_batch_size_per_gpu";
  const int64_t accum = config.value("gradient_accumulation_steps", int64_t(1));
  EXPECT_GE(accum, 1);
  if (train && micro) {
    EXPECT_EQ(config["train_batch_size"].get<int64_t>(),
              config["train_micro_batch_size_per_gpu"].get<int64_t>() * accum * world);
  } else if (train) {
    EXPECT_EQ(config["train_batch_size"].get<int64_t>() % (accum * world), 0);
  }
  const auto enabled = [&](const char* key) { return config.contains(key) && config[key].value("enabled", false); };
  EXPECT_FALSE(enabled("bf16") && enabled("fp16")) << "bf16 and fp16 both enabled";
  if (config.contains("fp16")) {
    expect_keys_within(config["fp16"], kFp16Keys, "fp16");
    for (const auto& [key, value] : config["fp16"].items()) {
      if (kFp16IntegerKeys.contains(key)) {
        EXPECT_TRUE(value.is_number_integer()) << "fp16." << key << " must be an integer";
      }
      if (key == "loss_scale" || key == "min_loss_scale") {
        EXPECT_TRUE(value.is_number()) << "fp16." << key;
      }
    }
  }
  if (!config.contains("zero_optimization")) return;
  const json& zero = config["zero_optimization"];
  expect_keys_within(zero, kZeroKeys, "zero_optimization");
  const int stage = zero.value("stage", 0);
  // An offload section: its keys, the stage it needs, an nvme_path with "nvme".
  const auto check_offload = [&](const char* name, const std::set<std::string>& keys, bool stage_3_only) {
    if (!zero.contains(name)) return;
    const json& section = zero[name];
    expect_keys_within(section, keys, name);
    const std::string device = section.value("device", "none");
    if (device != "none") {
      EXPECT_GE(stage, stage_3_only ? 3 : 1) << name << " at stage " << stage;
    }
    if (device == "nvme") {
      EXPECT_TRUE(section.contains("nvme_path")) << name;
    }
  };
  check_offload("offload_optimizer", kOffloadOptimizerKeys, false);
  check_offload("offload_param", kOffloadParamKeys, true);
  if (zero.contains("offload_optimizer") && zero["offload_optimizer"].contains("ratio")) {
    const double ratio = zero["offload_optimizer"]["ratio"].get<double>();
    EXPECT_GT(ratio, 0);
    EXPECT_LE(ratio, 1);
    if (ratio < 1) {
      EXPECT_EQ(stage, 3) << "Partial offloading only supported for ZeRO Stage 3";
    }
  }
  if (config.contains("aio")) expect_keys_within(config["aio"], kAioKeys, "aio");
}

}  // namespace zb::test
