// The sweep's plan: the cross product in its order (smaller batches and sequences first within a kind), the
// configurations an out-of-memory failure rules out (larger in both sizes, same everything else) with the reason
// the record gives, and the profiling matrix's JSON config.
#include <gtest/gtest.h>

#include "bench/sweep_plan.h"
#include "core/errors.h"

namespace zb {
namespace {

SweepAxes two_by_two_by_three() {
  SweepAxes a;
  a.models = {"gpt2", "llama-tiny"};
  a.optimizers = {"adamw", "sgd"};
  a.batch_sizes = {8, 1, 4};  // run ascending whatever the order given
  a.seq_lengths = {1024, 512};
  return a;
}

TEST(SweepPlan, RunsTheCrossProductWithSizesAscendingInnermost) {
  const std::vector<SweepPoint> points = sweep_points(two_by_two_by_three());
  ASSERT_EQ(points.size(), 2u * 2u * 2u * 3u);
  // The first kind: gpt2 with adamw, every sequence length (ascending) and, within each, every batch (ascending).
  const std::vector<std::pair<int64_t, int64_t>> first_kind = {{512, 1}, {512, 4}, {512, 8},
                                                              {1024, 1}, {1024, 4}, {1024, 8}};
  for (size_t i = 0; i < first_kind.size(); ++i) {
    EXPECT_EQ(points[i].model, "gpt2");
    EXPECT_EQ(points[i].optimizer, "adamw");
    EXPECT_EQ(points[i].seq_length, first_kind[i].first) << i;
    EXPECT_EQ(points[i].batch_size, first_kind[i].second) << i;
  }
  EXPECT_EQ(points[6].optimizer, "sgd");
  EXPECT_EQ(points[6].model, "gpt2");
  EXPECT_EQ(points[12].model, "llama-tiny");
  EXPECT_EQ(points[12].optimizer, "adamw");
  EXPECT_EQ(points.back().model, "llama-tiny");
  EXPECT_EQ(points.back().optimizer, "sgd");
  EXPECT_EQ(points.back().batch_size, 8);
  EXPECT_EQ(points.back().seq_length, 1024);
  // Points of one kind differ in sizes only.
  EXPECT_EQ(points[0].kind(), points[5].kind());
  EXPECT_NE(points[0].kind(), points[6].kind());
}

TEST(SweepPlan, AnOutOfMemoryRulesOutTheLargerOfItsKindOnly) {
  const std::vector<SweepPoint> points = sweep_points(two_by_two_by_three());
  OutOfMemoryRule rule;
  const SweepPoint& failed = points[1];  // gpt2, adamw, seq 512, batch 4
  ASSERT_EQ(failed.batch_size, 4);
  ASSERT_EQ(failed.seq_length, 512);
  rule.ran_out(failed);
  std::vector<std::string> skipped;
  for (const SweepPoint& p : points)
    if (rule.skip_reason(p))
      skipped.push_back(std::to_string(p.seq_length) + "/" + std::to_string(p.batch_size) + " " + p.optimizer);
  // Batch 4 and 8 at 512 and at 1024, adamw only; batch 1 still runs at both lengths.
  EXPECT_EQ(skipped, (std::vector<std::string>{"512/4 adamw", "512/8 adamw", "1024/4 adamw", "1024/8 adamw"}));
  EXPECT_EQ(rule.skip_reason(points[2]).value_or(""), "skipped: batch 4 at seq 512 ran out");
  EXPECT_EQ(rule.ruled_out(points), 4u);
  // A failure at the longer sequence rules out nothing at the shorter one.
  OutOfMemoryRule longer;
  longer.ran_out(points[4]);  // seq 1024, batch 4
  EXPECT_FALSE(longer.skip_reason(points[2]).has_value()) << "seq 512, batch 8";
  EXPECT_TRUE(longer.skip_reason(points[5]).has_value()) << "seq 1024, batch 8";
}

TEST(SweepPlan, TheModelsDefaultSequenceIsComparedOnlyWithItself) {
  SweepAxes a;
  a.batch_sizes = {2, 4};
  a.seq_lengths = {0, 256};
  const std::vector<SweepPoint> points = sweep_points(a);
  ASSERT_EQ(points.size(), 4u);
  OutOfMemoryRule rule;
  rule.ran_out(points[0]);  // default length, batch 2
  EXPECT_EQ(rule.skip_reason(points[1]).value_or(""), "skipped: batch 2 ran out");
  EXPECT_FALSE(rule.skip_reason(points[2]).has_value()) << "256 may be shorter than the default";
}

TEST(SweepPlan, RefusesEmptyRepeatedOrNonPositiveAxesNamingTheFlag) {
  const auto message = [](const SweepAxes& a) {
    try {
      validate(a);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  SweepAxes a;
  a.models = {};
  EXPECT_EQ(message(a), "--models: name at least one value");
  a = {};
  a.batch_sizes = {4, 4};
  EXPECT_EQ(message(a), "--batch-sizes: 4 is named twice");
  a = {};
  a.batch_sizes = {0};
  EXPECT_EQ(message(a), "--batch-sizes: 0 is not a size (at least 1)");
  a = {};
  a.seq_lengths = {-5};
  EXPECT_EQ(message(a), "--seq-lengths: -5 is not a size (at least 1; 0: the model's default)");
  a = {};
  a.optimizers = {"sgd", "sgd"};
  EXPECT_EQ(message(a), "--optimizers: 'sgd' is named twice");
  EXPECT_EQ(message(SweepAxes{}), "accepted");
}

TEST(SweepPlan, ReadsTheMatrixsConfigAndRefusesUnknownKeys) {
  SweepAxes axes;
  std::optional<int64_t> steps;
  read_sweep_config(nlohmann::json::parse(R"({"models": ["gpt2", "gpt2-xl"], "batch_sizes": [1, 2, 4],
      "sequence_lengths": [128, 1024], "accumulation_steps": [1, 4], "optimizers": ["adam", "sgd"],
      "num_steps": 30})"),
                    "matrix.json", axes, steps);
  EXPECT_EQ(axes.models, (std::vector<std::string>{"gpt2", "gpt2-xl"}));
  EXPECT_EQ(axes.batch_sizes, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(axes.seq_lengths, (std::vector<int64_t>{128, 1024}));
  EXPECT_EQ(axes.grad_accum, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(axes.optimizers, (std::vector<std::string>{"adam", "sgd"}));
  EXPECT_EQ(axes.stages, (std::vector<int>{0})) << "an axis the file leaves out keeps its value";
  EXPECT_EQ(steps, 30);
  const auto refused = [&](const char* text) {
    SweepAxes ignored;
    std::optional<int64_t> n;
    try {
      read_sweep_config(nlohmann::json::parse(text), "m.json", ignored, n);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string unknown = refused(R"({"models": ["gpt2"], "batchsizes": [1], "lr": 0.1})");
  EXPECT_NE(unknown.find("--config m.json: unknown key(s) batchsizes, lr (accepted: "), std::string::npos) << unknown;
  EXPECT_EQ(refused(R"({"batch_sizes": 4})"), "--config m.json: batch_sizes must be a list");
  EXPECT_EQ(refused(R"({"batch_sizes": [4, "8"]})"), "--config m.json: batch_sizes holds \"8\", not a whole number");
  EXPECT_EQ(refused(R"({"models": [1]})"), "--config m.json: models holds 1, not a string");
  EXPECT_EQ(refused(R"({"num_steps": 0})"), "--config m.json: num_steps must be a whole number of at least 1");
  EXPECT_EQ(refused(R"([1, 2])"), "--config m.json: must be a JSON object of the sweep's axes");
}

}  // namespace
}  // namespace zb
