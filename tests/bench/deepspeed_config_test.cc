// The DeepSpeed config reader and writer of the comparison benchmarks: real ZeRO-Offload, ZeRO-Infinity and
// Hugging Face configs read to the settings they hold, each kind of bad input refused with a message naming
// its key, and the written configs keep to what DeepSpeed's schema accepts and read back unchanged.
#include "bench/deepspeed_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/errors.h"
#include "support/deepspeed_schema.h"
#include "support/temp_dir.h"

namespace zb {
namespace {

using nlohmann::json;
using test::expect_keys_within;
using test::kAioKeys;
using test::kOffloadOptimizerKeys;
using test::kOffloadParamKeys;
using test::kTopLevelKeys;
using test::kZeroKeys;

const std::string kSource = "--config ds.json";

DeepSpeedConfig parse(const std::string& text) {
  return parse_deepspeed_config(json::parse(text), kSource);
}

// Every field, one by one so that a failure names it; then the whole struct, which catches a field added
// later and missed here.
void expect_same(const DeepSpeedConfig& a, const DeepSpeedConfig& b) {
  EXPECT_EQ(a.stage, b.stage);
  EXPECT_EQ(a.offload_optimizer, b.offload_optimizer);
  EXPECT_EQ(a.offload_param, b.offload_param);
  EXPECT_EQ(a.offload_ratio, b.offload_ratio);
  EXPECT_EQ(a.nvme_path, b.nvme_path);
  EXPECT_EQ(a.micro_batch, b.micro_batch);
  EXPECT_EQ(a.grad_accum, b.grad_accum);
  EXPECT_EQ(a.train_batch, b.train_batch);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.reduce_bucket_size, b.reduce_bucket_size);
  EXPECT_EQ(a.allgather_bucket_size, b.allgather_bucket_size);
  EXPECT_EQ(a.stage3_prefetch_bucket_size, b.stage3_prefetch_bucket_size);
  EXPECT_EQ(a.stage3_param_persistence_threshold, b.stage3_param_persistence_threshold);
  EXPECT_EQ(a.overlap_comm, b.overlap_comm);
  EXPECT_EQ(a.aio_block_size, b.aio_block_size);
  EXPECT_EQ(a.aio_queue_depth, b.aio_queue_depth);
  EXPECT_EQ(a.aio_intra_op_parallelism, b.aio_intra_op_parallelism);
  EXPECT_EQ(a.aio_single_submit, b.aio_single_submit);
  EXPECT_EQ(a.aio_overlap_events, b.aio_overlap_events);
  EXPECT_EQ(a.gradient_clipping, b.gradient_clipping);
  EXPECT_EQ(a.optimizer, b.optimizer);
  EXPECT_EQ(a.lr, b.lr);
  EXPECT_EQ(a.weight_decay, b.weight_decay);
  EXPECT_EQ(a.activation_checkpointing, b.activation_checkpointing);
  EXPECT_TRUE(a == b);
}

// ---- Reading ----

TEST(DeepSpeedConfigRead, ZeroOffloadConfig) {
  const DeepSpeedConfig c = parse(R"({
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 4,
    "gradient_clipping": 1.0,
    "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}},
    "zero_optimization": {
      "stage": 2,
      "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "allgather_partitions": true,
      "allgather_bucket_size": 5e8,
      "overlap_comm": true,
      "reduce_scatter": true,
      "reduce_bucket_size": 2e8,
      "contiguous_gradients": true
    },
    "aio": {"block_size": 1048576, "queue_depth": 16, "thread_count": 2, "single_submit": false,
            "overlap_events": true},
    "steps_per_print": 100,
    "wall_clock_breakdown": false
  })");
  EXPECT_EQ(c.stage, 2);
  EXPECT_EQ(c.offload_optimizer, "cpu");
  EXPECT_EQ(c.offload_param, std::nullopt);
  EXPECT_EQ(c.offload_ratio, std::nullopt);
  EXPECT_EQ(c.nvme_path, std::nullopt);
  EXPECT_EQ(c.micro_batch, 8);
  EXPECT_EQ(c.grad_accum, 4);
  EXPECT_EQ(c.train_batch, std::nullopt);
  EXPECT_EQ(c.precision, "bf16");
  EXPECT_EQ(c.allgather_bucket_size, 500'000'000);
  EXPECT_EQ(c.reduce_bucket_size, 200'000'000);
  EXPECT_EQ(c.overlap_comm, true);
  EXPECT_EQ(c.aio_block_size, 1 << 20);
  EXPECT_EQ(c.aio_queue_depth, 16);
  EXPECT_EQ(c.aio_intra_op_parallelism, 2);  // from the older name
  EXPECT_EQ(c.aio_single_submit, false);
  EXPECT_EQ(c.aio_overlap_events, true);
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.optimizer, "adamw");
  EXPECT_EQ(c.lr, 3e-4);
  EXPECT_EQ(c.weight_decay, 0.1);
}

TEST(DeepSpeedConfigRead, ZeroInfinityConfig) {
  const DeepSpeedConfig c = parse(R"({
    "train_batch_size": 64,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 2,
    "fp16": {"enabled": false},
    "bf16": {"enabled": true},
    "zero_optimization": {
      "stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true, "buffer_count": 4,
                            "fast_init": false, "ratio": 0.3},
      "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true, "buffer_count": 5,
                        "buffer_size": 1e8, "max_in_cpu": 1e9},
      "overlap_comm": false,
      "contiguous_gradients": true,
      "sub_group_size": 1e9,
      "reduce_bucket_size": 1e7,
      "stage3_prefetch_bucket_size": 5e7,
      "stage3_param_persistence_threshold": 1e5,
      "stage3_max_live_parameters": 1e9,
      "stage3_max_reuse_distance": 1e9,
      "stage3_gather_16bit_weights_on_model_save": true
    },
    "aio": {"block_size": 262144, "queue_depth": 32, "intra_op_parallelism": 8, "single_submit": true,
            "overlap_events": false}
  })");
  EXPECT_EQ(c.stage, 3);
  EXPECT_EQ(c.offload_optimizer, "nvme");
  EXPECT_EQ(c.offload_param, "nvme");
  EXPECT_EQ(c.offload_ratio, 0.3);
  EXPECT_EQ(c.nvme_path, "/local_nvme");
  EXPECT_EQ(c.train_batch, 64);  // 4 * 2 * 8 GPUs: kept, not turned into anything
  EXPECT_EQ(c.micro_batch, 4);
  EXPECT_EQ(c.grad_accum, 2);
  EXPECT_EQ(c.precision, "bf16");
  EXPECT_EQ(c.overlap_comm, false);
  EXPECT_EQ(c.reduce_bucket_size, 10'000'000);
  EXPECT_EQ(c.stage3_prefetch_bucket_size, 50'000'000);
  EXPECT_EQ(c.stage3_param_persistence_threshold, 100'000);
  EXPECT_EQ(c.aio_block_size, 262144);
  EXPECT_EQ(c.aio_queue_depth, 32);
  EXPECT_EQ(c.aio_intra_op_parallelism, 8);
  EXPECT_EQ(c.aio_single_submit, true);
  EXPECT_EQ(c.aio_overlap_events, false);
}

TEST(DeepSpeedConfigRead, AutoValuesAreUnsetAndUnknownKeysIgnored) {
  // The shape of the Hugging Face Trainer's ZeRO-3 example, with keys of other DeepSpeed features around it.
  const DeepSpeedConfig c = parse(R"({
    "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto"}},
    "zero_optimization": {
      "stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "overlap_comm": true,
      "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto",
      "stage3_param_persistence_threshold": "auto",
      "stage3_gather_16bit_weights_on_model_save": true
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 2000,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": false,
    "comms_logger": {"enabled": false},
    "activation_checkpointing": {"partition_activations": true},
    "something_from_a_newer_release": [1, 2, 3]
  })");
  EXPECT_EQ(c.stage, 3);
  EXPECT_EQ(c.offload_optimizer, "cpu");
  EXPECT_EQ(c.overlap_comm, true);
  EXPECT_EQ(c.optimizer, "adamw");
  EXPECT_EQ(c.precision, std::nullopt);
  EXPECT_EQ(c.micro_batch, std::nullopt);
  EXPECT_EQ(c.grad_accum, std::nullopt);
  EXPECT_EQ(c.train_batch, std::nullopt);
  EXPECT_EQ(c.gradient_clipping, std::nullopt);
  EXPECT_EQ(c.reduce_bucket_size, std::nullopt);
  EXPECT_EQ(c.stage3_prefetch_bucket_size, std::nullopt);
  EXPECT_EQ(c.stage3_param_persistence_threshold, std::nullopt);
  EXPECT_EQ(c.lr, std::nullopt);
  EXPECT_EQ(c.weight_decay, std::nullopt);
  EXPECT_EQ(c.activation_checkpointing, "full") << "the section asks the model to checkpoint its blocks";

  expect_same(parse("{}"), DeepSpeedConfig{});
}

TEST(DeepSpeedConfigRead, OptimizerTypes) {
  // DeepSpeed's Adam runs as AdamW unless adam_w_mode is false.
  EXPECT_EQ(parse(R"({"optimizer": {"type": "Adam", "params": {"lr": 1e-3}}})").optimizer, "adamw");
  EXPECT_EQ(parse(R"({"optimizer": {"type": "adam", "params": {"adam_w_mode": false}}})").optimizer, "adam");
  EXPECT_EQ(parse(R"({"optimizer": {"type": "ADAMW", "params": {"adam_w_mode": false}}})").optimizer, "adamw");
  const DeepSpeedConfig sgd = parse(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.01, "momentum": 0.9}}})");
  EXPECT_EQ(sgd.optimizer, "sgd");
  EXPECT_EQ(sgd.lr, 0.01);
  // Without a type DeepSpeed builds no optimizer and ignores the params.
  const DeepSpeedConfig untyped = parse(R"({"optimizer": {"params": {"lr": 0.5}}})");
  EXPECT_EQ(untyped.optimizer, std::nullopt);
  EXPECT_EQ(untyped.lr, std::nullopt);
}

TEST(DeepSpeedConfigRead, PrecisionAndOlderSpellings) {
  EXPECT_EQ(parse(R"({"fp16": {"enabled": true}})").precision, "fp16");
  EXPECT_EQ(parse(R"({"bf16": {"enabled": false}})").precision, "fp32");
  EXPECT_EQ(parse(R"({"bf16": {"enabled": false}, "fp16": {"enabled": false}})").precision, "fp32");
  EXPECT_EQ(parse(R"({"bfloat16": {"enabled": true}})").precision, "bf16");
  EXPECT_EQ(parse(R"({"fp16": {"loss_scale": 0}})").precision, std::nullopt);
  // fp16's loss scaling, read where fp16 is enabled.
  const DeepSpeedConfig fp16 = parse(R"({"fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12,
                                                   "loss_scale_window": 500, "hysteresis": 4, "min_loss_scale": 0.25}})");
  EXPECT_EQ(fp16.loss_scale, 0.0);
  EXPECT_EQ(fp16.initial_scale_power, 12);
  EXPECT_EQ(fp16.loss_scale_window, 500);
  EXPECT_EQ(fp16.hysteresis, 4);
  EXPECT_EQ(fp16.min_loss_scale, 0.25);
  EXPECT_EQ(parse(R"({"fp16": {"enabled": false, "hysteresis": 4}})").hysteresis, std::nullopt) << "fp16 is off";
  // And written back, a static scale too.
  DeepSpeedConfig written;
  written.micro_batch = 1;
  written.precision = "fp16";
  written.loss_scale = 1024.0;
  written.hysteresis = 4;
  const auto out = deepspeed_config_json(written);
  EXPECT_EQ(out.at("fp16").at("loss_scale"), 1024.0);
  EXPECT_EQ(out.at("fp16").at("hysteresis"), 4);
  EXPECT_FALSE(out.at("fp16").contains("min_loss_scale")) << "unset: DeepSpeed's default";
  EXPECT_EQ(parse(out.dump()), written) << "the written config reads back as it was";
  // The deprecated forms DeepSpeed still reads.
  const DeepSpeedConfig old = parse(R"({"zero_optimization": {"stage": 3, "cpu_offload": true,
                                                               "cpu_offload_param": true}})");
  EXPECT_EQ(old.offload_optimizer, "cpu");
  EXPECT_EQ(old.offload_param, "cpu");
  EXPECT_EQ(parse(R"({"zero_optimization": true})").stage, 1);
  // Offload sections without a device mean DeepSpeed's default device.
  EXPECT_EQ(
      parse(R"({"zero_optimization": {"stage": 1, "offload_optimizer": {"pin_memory": true}}})").offload_optimizer,
      "none");
}

// ---- Refusals: one case per kind of bad input ----

struct BadInput {
  std::string name;
  std::string config;
  std::string expected;  // a part of the message: the key and what is wrong
};

class DeepSpeedConfigErrors : public testing::TestWithParam<BadInput> {};

TEST_P(DeepSpeedConfigErrors, RefusedWithAMessageNamingTheKey) {
  const BadInput& input = GetParam();
  try {
    parse(input.config);
    FAIL() << "accepted: " << input.config;
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(kSource + ": ", 0), 0u) << message;
    EXPECT_NE(message.find(input.expected), std::string::npos)
        << "expected \"" << input.expected << "\" in: " << message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    DeepSpeedConfig, DeepSpeedConfigErrors,
    testing::Values(
        BadInput{"StageOutOfRange", R"({"zero_optimization": {"stage": 5}})",
                 "zero_optimization.stage: must be 0, 1, 2 or 3, got 5"},
        BadInput{"FractionalStage", R"({"zero_optimization": {"stage": 2.5}})",
                 "zero_optimization.stage: must be 0, 1, 2 or 3, got 2.5"},
        BadInput{"StringWhereANumberBelongs", R"({"train_micro_batch_size_per_gpu": "eight"})",
                 "train_micro_batch_size_per_gpu: must be a positive integer, got \"eight\""},
        BadInput{"ZeroAccumulation", R"({"gradient_accumulation_steps": 0})",
                 "gradient_accumulation_steps: must be a positive integer, got 0"},
        BadInput{"NegativeBucketSize", R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": -5e8}})",
                 "zero_optimization.reduce_bucket_size: must be a non-negative integer"},
        BadInput{"FractionalBucketSize", R"({"zero_optimization": {"allgather_bucket_size": 1.5}})",
                 "zero_optimization.allgather_bucket_size: must be a non-negative integer, got 1.5"},
        BadInput{"NumberWhereABooleanBelongs", R"({"zero_optimization": {"overlap_comm": 1}})",
                 "zero_optimization.overlap_comm: must be true or false, got 1"},
        BadInput{"SectionNotAnObject", R"({"aio": 4})", "aio: must be an object, got 4"},
        BadInput{"UnknownOffloadDevice",
                 R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}})",
                 "zero_optimization.offload_optimizer.device: must be \"none\", \"cpu\" or \"nvme\", got \"gpu\""},
        BadInput{"OffloadRatioZero",
                 R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0}}})",
                 "zero_optimization.offload_optimizer.ratio: must be a positive number, got 0"},
        BadInput{"OffloadRatioAboveOne",
                 R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 1.5}}})",
                 "zero_optimization.offload_optimizer.ratio: must be in (0, 1], got 1.5"},
        BadInput{"NvmeWithoutPath", R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
                 "zero_optimization.offload_param.nvme_path: required"},
        BadInput{"TwoNvmePaths", R"({"zero_optimization": {"stage": 3,
                   "offload_optimizer": {"device": "nvme", "nvme_path": "/a"},
                   "offload_param": {"device": "nvme", "nvme_path": "/b"}}})",
                 "zero_optimization.offload_param.nvme_path"},
        BadInput{"ParameterOffloadBelowStage3",
                 R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})",
                 "zero_optimization.offload_param: parameter offload needs stage 3"},
        BadInput{"OptimizerOffloadAtStage0", R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})",
                 "zero_optimization.offload_optimizer: optimizer offload needs stage 1, 2 or 3"},
        BadInput{"Fp16ScalePowerOutOfRange", R"({"fp16": {"enabled": true, "initial_scale_power": 200}})",
                 "fp16.initial_scale_power: must be an integer in [0, 127], got 200"},
        BadInput{"Fp16HysteresisZero", R"({"fp16": {"enabled": true, "hysteresis": 0}})",
                 "fp16.hysteresis: must be a positive integer, got 0"},
        BadInput{"Fp16MinimumScaleZero", R"({"fp16": {"enabled": true, "min_loss_scale": 0}})",
                 "fp16.min_loss_scale: must be a positive number, got 0"},
        BadInput{"Fp16NegativeLossScale", R"({"fp16": {"enabled": true, "loss_scale": -1}})",
                 "fp16.loss_scale: must be a non-negative number, got -1"},
        BadInput{"Fp16AndBf16BothEnabled", R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})",
                 "bf16.enabled and fp16.enabled: cannot both be true"},
        BadInput{"EnabledNotABoolean", R"({"bf16": {"enabled": "yes"}})", "bf16.enabled: must be true or false"},
        BadInput{"UnsupportedOptimizer", R"({"optimizer": {"type": "Lamb"}})",
                 "optimizer.type: must be Adam, AdamW or SGD, got \"Lamb\""},
        BadInput{"SgdSpelledAsTorchDoesNot", R"({"optimizer": {"type": "sgd"}})", "optimizer.type: DeepSpeed finds"},
        BadInput{"MaxGradNormInOptimizerParams", R"({"optimizer": {"type": "AdamW", "params": {"max_grad_norm": 1}}})",
                 "optimizer.params.max_grad_norm"},
        BadInput{"NegativeLearningRate", R"({"optimizer": {"type": "AdamW", "params": {"lr": -1}}})",
                 "optimizer.params.lr: must be a positive number, got -1"},
        BadInput{"NegativeClipping", R"({"gradient_clipping": -1.0})",
                 "gradient_clipping: must be a non-negative number"},
        BadInput{"AioQueueDepthZero", R"({"aio": {"queue_depth": 0}})",
                 "aio.queue_depth: must be a positive integer, got 0"},
        BadInput{"NotAnObject", R"([1, 2])", "must be a JSON object"},
        BadInput{"CheckpointsOnTheCpu", R"({"activation_checkpointing": {"cpu_checkpointing": true}})",
                 "activation_checkpointing.cpu_checkpointing: keeping the checkpoints in host memory is not supported"},
        BadInput{"CheckpointingFlagNotABoolean", R"({"activation_checkpointing": {"partition_activations": 1}})",
                 "activation_checkpointing.partition_activations: must be true or false"}),
    [](const testing::TestParamInfo<BadInput>& param_info) { return param_info.param.name; });

// ---- Files ----

TEST(DeepSpeedConfigFile, ReadsAFileWithComments) {
  test::TempDir dir;
  const std::string path = dir / "ds.json";
  std::ofstream(path) << "// ZeRO-2\n{\"zero_optimization\": {\"stage\": 2}, /* per GPU */ "
                         "\"train_micro_batch_size_per_gpu\": 2}\n";
  const DeepSpeedConfig c = read_deepspeed_config(path);
  EXPECT_EQ(c.stage, 2);
  EXPECT_EQ(c.micro_batch, 2);
}

TEST(DeepSpeedConfigFile, RefusesMissingMalformedAndDuplicatedWithThePath) {
  test::TempDir dir;
  const auto message = [](const std::string& path) {
    try {
      read_deepspeed_config(path);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string missing = dir / "missing.json";
  EXPECT_EQ(message(missing), "--config " + missing + ": no such file");
  EXPECT_NE(message(dir.path().string()).find("--config " + dir.path().string() + ": "), std::string::npos);

  const std::string malformed = dir / "malformed.json";
  std::ofstream(malformed) << "{\"zero_optimization\": {\"stage\": 2,}";
  EXPECT_NE(message(malformed).find("--config " + malformed + ": not valid JSON"), std::string::npos)
      << message(malformed);

  const std::string twice = dir / "twice.json";
  std::ofstream(twice) << R"({"zero_optimization": {"stage": 2, "stage": 3}})";
  EXPECT_EQ(message(twice), "--config " + twice + ": stage: given twice in one object");

  // The same key in two different objects is fine.
  const std::string nested = dir / "nested.json";
  std::ofstream(nested) << R"({"fp16": {"enabled": false}, "bf16": {"enabled": true}})";
  EXPECT_EQ(read_deepspeed_config(nested).precision, "bf16");

  const std::string bad_value = dir / "bad_value.json";
  std::ofstream(bad_value) << R"({"zero_optimization": {"stage": 7}})";
  EXPECT_EQ(message(bad_value), "--config " + bad_value + ": zero_optimization.stage: must be 0, 1, 2 or 3, got 7");
}

// ---- Writing ----

DeepSpeedConfig full_stage3() {
  DeepSpeedConfig c;
  c.stage = 3;
  c.offload_optimizer = "nvme";
  c.offload_param = "cpu";
  c.offload_ratio = 0.75;
  c.nvme_path = "/mnt/nvme0/zb";
  c.micro_batch = 4;
  c.grad_accum = 8;
  c.precision = "bf16";
  c.reduce_bucket_size = 500'000'000;
  c.allgather_bucket_size = 200'000'000;
  c.stage3_prefetch_bucket_size = 50'000'000;
  c.stage3_param_persistence_threshold = 100'000;
  c.overlap_comm = true;
  c.aio_block_size = 1 << 20;
  c.aio_queue_depth = 32;
  c.aio_intra_op_parallelism = 4;
  c.aio_single_submit = false;
  c.aio_overlap_events = true;
  c.gradient_clipping = 1.0;
  c.optimizer = "adamw";
  c.lr = 3e-4;
  c.weight_decay = 0.1;
  return c;
}

TEST(DeepSpeedConfigWrite, RoundTripKeepsEverySetting) {
  const DeepSpeedConfig stage3 = full_stage3();
  expect_same(parse_deepspeed_config(deepspeed_config_json(stage3), kSource), stage3);

  DeepSpeedConfig stage2;
  stage2.stage = 2;
  stage2.offload_optimizer = "cpu";
  stage2.micro_batch = 16;
  stage2.precision = "fp32";
  stage2.optimizer = "adam";
  stage2.weight_decay = 0.0;
  stage2.overlap_comm = false;
  expect_same(parse_deepspeed_config(deepspeed_config_json(stage2), kSource), stage2);

  DeepSpeedConfig sgd;
  sgd.stage = 1;
  sgd.micro_batch = 1;
  sgd.optimizer = "sgd";
  sgd.lr = 0.1;
  expect_same(parse_deepspeed_config(deepspeed_config_json(sgd), kSource), sgd);

  DeepSpeedConfig checkpointed = sgd;
  checkpointed.activation_checkpointing = "full";
  expect_same(parse_deepspeed_config(deepspeed_config_json(checkpointed), kSource), checkpointed);

  DeepSpeedConfig global_batch_only;
  global_batch_only.train_batch = 512;
  global_batch_only.grad_accum = 2;
  expect_same(parse_deepspeed_config(deepspeed_config_json(global_batch_only), kSource), global_batch_only);
}

TEST(DeepSpeedConfigWrite, OnlyKeysDeepSpeedKnows) {
  const json out = deepspeed_config_json(full_stage3());
  expect_keys_within(out, kTopLevelKeys, "the config");
  const json& zero = out.at("zero_optimization");
  expect_keys_within(zero, kZeroKeys, "zero_optimization");
  expect_keys_within(zero.at("offload_optimizer"), kOffloadOptimizerKeys, "offload_optimizer");
  expect_keys_within(zero.at("offload_param"), kOffloadParamKeys, "offload_param");
  expect_keys_within(out.at("aio"), kAioKeys, "aio");
  // The aio setting under both of its names, so that old and new releases read the same value.
  EXPECT_EQ(out.at("aio").at("intra_op_parallelism"), 4);
  EXPECT_EQ(out.at("aio").at("thread_count"), 4);
  EXPECT_EQ(out.at("optimizer").at("type"), "AdamW");

  DeepSpeedConfig checkpointed = full_stage3();
  for (const char* mode : {"full", "selective"}) {
    checkpointed.activation_checkpointing = mode;
    const json section = deepspeed_config_json(checkpointed).at("activation_checkpointing");
    expect_keys_within(section, test::kActivationCheckpointingKeys, "activation_checkpointing");
    EXPECT_EQ(section.at("cpu_checkpointing"), false) << mode;
  }
  checkpointed.activation_checkpointing = "none";
  EXPECT_FALSE(deepspeed_config_json(checkpointed).contains("activation_checkpointing"));
}

TEST(DeepSpeedConfigWrite, IntegersWhereDeepSpeedWantsThem) {
  // Read from the float spellings that configs use, written back as integers.
  const DeepSpeedConfig c = parse(R"({
    "train_micro_batch_size_per_gpu": 4.0, "gradient_accumulation_steps": 2.0,
    "zero_optimization": {"stage": 3.0, "reduce_bucket_size": 5e8, "allgather_bucket_size": 2e8,
                          "stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 1e5},
    "aio": {"block_size": 1.048576e6, "queue_depth": 8.0, "intra_op_parallelism": 2.0}
  })");
  const json out = deepspeed_config_json(c);
  const json& zero = out.at("zero_optimization");
  for (const json* value :
       {&out.at("train_micro_batch_size_per_gpu"), &out.at("gradient_accumulation_steps"), &zero.at("stage"),
        &zero.at("reduce_bucket_size"), &zero.at("allgather_bucket_size"), &zero.at("stage3_prefetch_bucket_size"),
        &zero.at("stage3_param_persistence_threshold"), &out.at("aio").at("block_size"),
        &out.at("aio").at("queue_depth"), &out.at("aio").at("intra_op_parallelism")})
    EXPECT_TRUE(value->is_number_integer()) << value->dump() << " in " << out.dump();
  EXPECT_EQ(zero.at("reduce_bucket_size").dump(), "500000000");
  EXPECT_EQ(out.at("aio").at("block_size").dump(), "1048576");
}

TEST(DeepSpeedConfigWrite, LeavesOutWhatTheStageCannotUse) {
  DeepSpeedConfig c = full_stage3();
  EXPECT_EQ(deepspeed_config_json(c).at("zero_optimization").at("offload_optimizer").at("ratio"), 0.75);
  c.stage = 2;
  // DeepSpeed refuses a partial optimizer offload below stage 3 ("Partial offloading only supported for ZeRO
  // Stage 3"): the writer refuses to write one.
  EXPECT_THROW(deepspeed_config_json(c), Error);
  c.offload_ratio.reset();
  json zero = deepspeed_config_json(c).at("zero_optimization");
  EXPECT_FALSE(zero.contains("offload_param")) << zero.dump();
  EXPECT_FALSE(zero.contains("stage3_prefetch_bucket_size")) << zero.dump();
  EXPECT_FALSE(zero.contains("stage3_param_persistence_threshold")) << zero.dump();
  EXPECT_EQ(zero.at("offload_optimizer").at("device"), "nvme");
  EXPECT_EQ(zero.at("offload_optimizer").at("nvme_path"), "/mnt/nvme0/zb");
  EXPECT_FALSE(zero.at("offload_optimizer").contains("ratio"));
  DeepSpeedConfig whole = full_stage3();
  whole.offload_ratio = 1.0;  // DeepSpeed's default: left out
  EXPECT_FALSE(deepspeed_config_json(whole).at("zero_optimization").at("offload_optimizer").contains("ratio"));

  c.stage = 0;
  zero = deepspeed_config_json(c).at("zero_optimization");
  EXPECT_FALSE(zero.contains("offload_optimizer")) << zero.dump();
  EXPECT_FALSE(zero.contains("offload_param")) << zero.dump();
  EXPECT_EQ(zero.at("stage"), 0);

  // With no stage DeepSpeed runs stage 0, and the writer treats it so.
  c.stage.reset();
  zero = deepspeed_config_json(c).at("zero_optimization");
  EXPECT_FALSE(zero.contains("stage")) << zero.dump();
  EXPECT_FALSE(zero.contains("offload_optimizer")) << zero.dump();

  // What is unset is left out, for DeepSpeed's defaults.
  DeepSpeedConfig minimal;
  minimal.micro_batch = 2;
  EXPECT_EQ(deepspeed_config_json(minimal), json::parse(R"({"train_micro_batch_size_per_gpu": 2})"));
}

TEST(DeepSpeedConfigWrite, OffloadsPinMemoryAndNamedOptimizers) {
  const json out = deepspeed_config_json(full_stage3());
  const json& zero = out.at("zero_optimization");
  EXPECT_EQ(zero.at("offload_optimizer").at("pin_memory"), true);
  EXPECT_EQ(zero.at("offload_param").at("pin_memory"), true);
  EXPECT_EQ(zero.at("offload_optimizer").at("nvme_path"), "/mnt/nvme0/zb");
  EXPECT_EQ(zero.at("offload_optimizer").at("ratio"), 0.75);
  DeepSpeedConfig whole = full_stage3();
  whole.offload_ratio = 1.0;  // DeepSpeed's default: left out
  EXPECT_FALSE(deepspeed_config_json(whole).at("zero_optimization").at("offload_optimizer").contains("ratio"));
  EXPECT_FALSE(zero.at("offload_param").contains("nvme_path")) << "a cpu offload needs no path";
  EXPECT_EQ(out.at("bf16").at("enabled"), true);
  EXPECT_EQ(out.at("fp16").at("enabled"), false);

  DeepSpeedConfig sgd;
  sgd.stage = 2;
  sgd.micro_batch = 1;
  sgd.optimizer = "sgd";
  const json sgd_out = deepspeed_config_json(sgd);
  EXPECT_EQ(sgd_out.at("optimizer").at("type"), "SGD");
  EXPECT_EQ(sgd_out.at("zero_allow_untested_optimizer"), true) << "ZeRO runs torch's SGD only when allowed";

  DeepSpeedConfig adam = sgd;
  adam.optimizer = "adam";
  const json adam_out = deepspeed_config_json(adam);
  EXPECT_EQ(adam_out.at("optimizer").at("type"), "Adam");
  EXPECT_EQ(adam_out.at("optimizer").at("params").at("adam_w_mode"), false);
  EXPECT_FALSE(adam_out.contains("zero_allow_untested_optimizer"));
}

TEST(DeepSpeedConfigWrite, RefusesWhatDeepSpeedWouldRefuse) {
  DeepSpeedConfig no_batch;
  no_batch.stage = 2;
  EXPECT_THROW(deepspeed_config_json(no_batch), Error);

  DeepSpeedConfig nvme_without_path = full_stage3();
  nvme_without_path.nvme_path.reset();
  EXPECT_THROW(deepspeed_config_json(nvme_without_path), Error);

  DeepSpeedConfig bad_device = full_stage3();
  bad_device.offload_param = "gpu";
  EXPECT_THROW(deepspeed_config_json(bad_device), Error);
}

// DeepSpeed's batch arithmetic (deepspeed/runtime/config.py): train_batch_size = micro-batch x accumulation x
// GPUs; any two give the third, one alone takes accumulation 1, three must agree.
TEST(DeepSpeedBatch, DerivedAsDeepSpeedDerivesIt) {
  const auto batch = [](const std::string& text, int world) { return deepspeed_batch(parse(text), world, kSource); };
  const auto expect = [&](const std::string& text, int world, int64_t micro, int64_t accum) {
    const std::optional<DeepSpeedBatch> b = batch(text, world);
    ASSERT_TRUE(b.has_value()) << text;
    EXPECT_EQ(b->micro_batch, micro) << text << " on " << world;
    EXPECT_EQ(b->grad_accum, accum) << text << " on " << world;
  };
  EXPECT_FALSE(batch("{}", 4).has_value());
  expect(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2})", 4, 8, 2);
  expect(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8})", 4, 8, 2);
  expect(R"({"train_batch_size": 64, "gradient_accumulation_steps": 4})", 4, 4, 4);
  expect(R"({"train_batch_size": 64})", 4, 16, 1);
  expect(R"({"train_batch_size": 64})", 1, 64, 1);
  expect(R"({"train_micro_batch_size_per_gpu": 8})", 4, 8, 1);
  expect(R"({"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 3})", 2, 8, 3);
  const auto message = [&](const std::string& text, int world) -> std::string {
    try {
      batch(text, world);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "accepted";
  };
  // Three that disagree on this GPU count (they agree on 2), a global batch the others do not divide, and
  // an accumulation alone.
  const std::string three = R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4})";
  EXPECT_EQ(message(three, 2), "accepted");
  EXPECT_NE(message(three, 4).find("64 != 8 x 4 x 4"), std::string::npos) << message(three, 4);
  EXPECT_NE(message(R"({"train_batch_size": 100, "train_micro_batch_size_per_gpu": 8})", 1)
                .find("train_batch_size 100 is not a multiple of 8 x 1"),
            std::string::npos);
  EXPECT_NE(message(R"({"train_batch_size": 30})", 4).find("not a multiple of 1 x 4"), std::string::npos);
  EXPECT_NE(message(R"({"gradient_accumulation_steps": 4})", 1).find("needs train_batch_size or"),
            std::string::npos);
  EXPECT_EQ(message(three, 4).rfind(kSource + ": ", 0), 0u) << "names the file";
}

}  // namespace
}  // namespace zb
