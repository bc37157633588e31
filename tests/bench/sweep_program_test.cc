// sweep end to end on the CPU backend with the tiny models: the cross product runs in its order with every axis in
// the records; --device-memory-limit-gb runs a configuration out of memory exactly where the memory model says its
// pools pass the cap, and the larger ones of its kind are skipped, not run; the per-model profile's unit times add up
// to the step; --config gives the axes and the flags win; --gather merges profiles and refuses another model's or
// code version's; bad input exits 2 before any work.
#include <gtest/gtest.h>

#include <cmath>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/program_outputs.h"
#include "support/run_program.h"
#include "support/temp_dir.h"

namespace zb::test {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const std::string kModel = "--device cpu --models gpt2-tiny --warmup-steps 0 ";
const std::string kQuick = kModel + "--num-steps 2 ";

Json sweep_records(const fs::path& dir) {
  return read_json(only_file(dir, "sweep_", ".json"));
}

// The profile a run of `model` on the CPU backend wrote.
Json profile_of(const fs::path& dir, const std::string& model = "gpt2-tiny") {
  return read_json(dir / "profiles" / model / "CPU" / "profile.json");
}

TEST(Sweep, RunsTheCrossProductInOrderWithEveryAxisRecorded) {
  TempDir out;
  const ProgramResult r =
      run_program("sweep", kQuick + "--optimizers adamw sgd --batch-sizes 2 1 --seq-lengths 32 128 --output-dir " +
                               out.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("sweep: 4 configuration(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not run: gpt2-tiny: seq 128 exceeds its maximum of 64 (4 configuration(s) left out)"),
            std::string::npos)
      << r.output;
  const Json records = sweep_records(out.path());
  ASSERT_EQ(records.size(), 4u);
  const std::vector<std::pair<std::string, int64_t>> expected = {{"adamw", 1}, {"adamw", 2}, {"sgd", 1}, {"sgd", 2}};
  for (size_t i = 0; i < records.size(); ++i) {
    SCOPED_TRACE(i);
    const Json& record = records[i];
    EXPECT_EQ(record["status"], "ok") << record["error"];
    EXPECT_EQ(record["optimizer"], expected[i].first);
    EXPECT_EQ(record["batch_size"], expected[i].second);
    EXPECT_EQ(record["seq_length"], 32);
    EXPECT_EQ(record["model"], "gpt2-tiny");
    EXPECT_EQ(record["dtype"], "fp32");
    EXPECT_EQ(record["lora_rank"], 0);
    EXPECT_EQ(record["activation_checkpointing"], "none");
    EXPECT_GT(record["throughput_tokens_per_sec"].get<double>(), 0);
  }
  const std::string csv = read_text(only_file(out.path(), "sweep_", ".csv"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5) << "a header and a line a configuration";
  EXPECT_NE(csv.find("lora_rank"), std::string::npos);
  const std::string svg = read_text(only_file(out.path(), "sweep_", ".svg"));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(r.output.find("fits up to batch 2 at seq 32"), std::string::npos) << r.output;
}

// The memory model's pools (ZeRO's formulas and the activations' plan) of a record, in GB.
double predicted_pools_gb(const Json& record) {
  return record["predicted_parameters_gb"].get<double>() + record["predicted_gradients_gb"].get<double>() +
         record["predicted_optimizer_state_gb"].get<double>() + record["predicted_activations_gb"].get<double>();
}

TEST(Sweep, AMemoryCapRunsOutWhereTheMemoryModelSaysAndSkipsTheLargerOnes) {
  TempDir free_dir, capped_dir;
  const std::string axes = kQuick + "--batch-sizes 1 2 4 8 16 --seq-lengths 64 ";
  const ProgramResult free_run = run_job("sweep", axes + "--output-dir " + free_dir.path().string());
  ASSERT_EQ(free_run.exit_code, 0) << free_run.output;
  const Json free_records = sweep_records(free_dir.path());
  ASSERT_EQ(free_records.size(), 5u);
  // What the model leaves out (the workspace pool, the allocator's padding): measured peak less predicted pools.
  double unmodelled = 0;
  for (const Json& record : free_records) {
    ASSERT_EQ(record["status"], "ok") << record["error"];
    unmodelled = std::max(unmodelled, record["gpu_peak_gb"].get<double>() - predicted_pools_gb(record));
  }
  // A cap halfway between batch 2's and batch 4's predicted pools: batch 4 must run out, batch 2 fit.
  const double cap = (predicted_pools_gb(free_records[1]) + predicted_pools_gb(free_records[2])) / 2;
  ASSERT_GT(cap - predicted_pools_gb(free_records[1]), unmodelled)
      << "batch 2 must fit the cap with what the model leaves out, or the test says nothing";
  const ProgramResult r = run_job("sweep", axes + "--device-memory-limit-gb " + std::to_string(cap) + " --output-dir " +
                                               capped_dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("expected: 1 to run out of memory and 2 to be skipped"), std::string::npos) << r.output;
  const Json records = sweep_records(capped_dir.path());
  ASSERT_EQ(records.size(), 5u);
  for (size_t i = 0; i < records.size(); ++i) {
    SCOPED_TRACE(i);
    const Json& record = records[i];
    EXPECT_NEAR(record["device_memory_limit_gb"].get<double>(), cap, 1e-6);  // (as std::to_string wrote it)
    if (predicted_pools_gb(free_records[i]) > cap) {
      EXPECT_EQ(record["status"], "oom");
    } else {
      EXPECT_EQ(record["status"], "ok") << record["error"];
    }
  }
  // The first to run out says which pool asked and how much; the larger ones are not run.
  EXPECT_NE(records[2]["error"].get<std::string>().find("--device-memory-limit-gb"), std::string::npos)
      << records[2]["error"];
  EXPECT_FALSE(records[2]["oom_pool"].get<std::string>().empty());
  EXPECT_GT(records[2]["oom_bytes"].get<int64_t>(), 0);
  for (size_t i : {size_t(3), size_t(4)}) {
    EXPECT_EQ(records[i]["error"], "skipped: batch 4 at seq 64 ran out");
    EXPECT_TRUE(records[i]["gpu_peak_gb"].is_null()) << "a skipped configuration did not run";
  }
  EXPECT_NE(r.output.find("fits up to batch 2 at seq 64"), std::string::npos) << r.output;
}

// A model's sliding window narrower than the sequence is computed (a band of keys), not left out.
TEST(Sweep, RunsSequencesBeyondASlidingWindow) {
  TempDir out;
  const fs::path model = out.path() / "mistral";
  fs::create_directories(model);
  std::ofstream(model / "config.json") << R"({"model_type": "mistral", "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 64, "sliding_window": 16, "_name_or_path": "mistral-window-16"})";
  const ProgramResult r = run_program("sweep", "--device cpu --warmup-steps 0 --num-steps 2 --batch-sizes 1 "
                                               "--seq-lengths 16 32 --models " + model.string() +
                                               " --output-dir " + (out.path() / "runs").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("not run:"), std::string::npos) << r.output;
  const Json records = sweep_records(out.path() / "runs");
  ASSERT_EQ(records.size(), 2u);
  for (const Json& record : records) EXPECT_EQ(record["status"], "ok") << record.dump();
  EXPECT_EQ(records[1]["seq_length"], 32);
}

// The units, the update and the rest add up to the profiled step within 5%. Wall-clock time on the CPU backend: a
// busy host can preempt the step between its profiled parts (an unaccounted gap), so up to three sweeps are run and
// one must add up; an accounting error (a unit missed or counted twice: 11-42% of this step) fails all three.
TEST(Sweep, TheProfilesUnitTimesAddUpToTheStep) {
  double worst_of_best = 1e300;
  for (int attempt = 0; attempt < 3 && worst_of_best > 0.05; ++attempt) {
    TempDir out;
    const ProgramResult r = run_program("sweep", kModel + "--batch-sizes 2 --seq-lengths 32 --grad-accum 1 2 " +
                                                     "--num-steps 5 --output-dir " + out.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Json profile = profile_of(out.path());
    EXPECT_EQ(profile["model"], "gpt2-tiny");
    EXPECT_EQ(profile["gpu"], "CPU");
    ASSERT_EQ(profile["machines"].size(), 1u);
    EXPECT_TRUE(profile["machines"][0]["peak_rates"].contains("gemm_tflops"));
    ASSERT_EQ(profile["entries"].size(), 2u);
    double worst = 0;
    for (const Json& entry : profile["entries"]) {
      const int64_t accum = entry["configuration"]["grad_accum"];
      SCOPED_TRACE(accum);
      std::vector<std::string> units;
      double units_ms = 0;
      for (const Json& unit : entry["units"]) {
        units.push_back(unit["unit"]);
        EXPECT_GT(unit["forward_ms"].get<double>(), 0) << unit["unit"];
        EXPECT_GT(unit["backward_ms"].get<double>(), 0) << unit["unit"];
        units_ms += unit["forward_ms"].get<double>() + unit["backward_ms"].get<double>();
      }
      EXPECT_EQ(units, (std::vector<std::string>{"embeddings", "block.0", "block.1", "final"}));
      // Per micro-batch: the step holds `accum` of them, the update and what lies outside the units.
      const double accounted = units_ms * double(accum) + entry["optimizer"]["gpu_ms"].get<double>() +
                               entry["optimizer"]["cpu_ms"].get<double>() + entry["other_compute_ms"].get<double>();
      const double step = entry["profiled_step_ms"];
      worst = std::max(worst, std::abs(accounted - step) / step);
      EXPECT_GT(entry["optimizer"]["gpu_ns_per_parameter"].get<double>(), 0);
      EXPECT_GT(entry["memory_gb"]["measured"]["activations"].get<double>(), 0);
      EXPECT_GT(entry["memory_gb"]["predicted"]["activations"].get<double>(), 0);
    }
    worst_of_best = std::min(worst_of_best, worst);
  }
  EXPECT_LE(worst_of_best, 0.05) << "units + update + rest against the profiled step, the best of three sweeps";
}

TEST(Sweep, AConfigFileGivesTheAxesAndTheFlagsWin) {
  TempDir out;
  const fs::path config = out.path() / "profiling_config.json";
  std::ofstream(config) << R"({"models": ["gpt2-tiny"], "batch_sizes": [1, 2], "sequence_lengths": [32],
                               "optimizers": ["sgd"], "num_steps": 3})";
  const ProgramResult r = run_program("sweep", "--device cpu --warmup-steps 0 --batch-sizes 2 --config " +
                                                   config.string() + " --output-dir " + out.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("0 warm-up + 3 timed steps"), std::string::npos) << r.output;
  const Json records = sweep_records(out.path());
  ASSERT_EQ(records.size(), 1u) << "--batch-sizes 2 replaces the file's batch sizes";
  EXPECT_EQ(records[0]["optimizer"], "sgd");
  EXPECT_EQ(records[0]["batch_size"], 2);

  std::ofstream(config) << R"({"models": ["gpt2-tiny"], "batch_size": [1], "precision": "bf16"})";
  TempDir nothing;
  const ProgramResult bad =
      run_program("sweep", "--device cpu --config " + config.string() + " --output-dir " + nothing.path().string());
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("batch_size"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("precision"), std::string::npos) << bad.output;
  EXPECT_TRUE(fs::is_empty(nothing.path()));
}

TEST(Sweep, BadAxesAreRefusedBeforeAnyWork) {
  TempDir out;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--batch-sizes 0", "--batch-sizes"},
      {"--optimizers adamw adamw", "--optimizers"},
      {"--stages 5", "--stages"},
      {"--optimizers lion", "optimizer"},
      {"--seq-lengths -4", "--seq-lengths"},
      {"--device-memory-limit-gb -1", "--device-memory-limit-gb"},
      {"--strategies nvme", "--nvme-path"},
      {"--seq-lengths 128", "--seq-lengths"},
      {"--models gpt9", "--models"},
      {"--seq-lengths 0 64", "two values name the same configuration"},
      {"--dtype fp32 \"\"", "two values name the same configuration"}};
  for (const auto& [arguments, flag] : cases) {
    SCOPED_TRACE(arguments);
    const ProgramResult r = run_program("sweep", kQuick + arguments + " --output-dir " + out.path().string());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << r.output;
  }
  EXPECT_TRUE(fs::is_empty(out.path()));
}

TEST(Sweep, GatherMergesProfilesAndRefusesAnotherModelOrCodeVersion) {
  TempDir first, second, other_model, merged;
  for (const auto& [dir, batch] : {std::pair{&first, 1}, std::pair{&second, 2}}) {
    const ProgramResult r = run_program("sweep", kQuick + "--batch-sizes " + std::to_string(batch) +
                                                     " --seq-lengths 32 --output-dir " + dir->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const ProgramResult g = run_program("sweep", "--gather " + first.path().string() + " " + second.path().string() +
                                                   " --output-dir " + merged.path().string());
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const Json profile = profile_of(merged.path());
  ASSERT_EQ(profile["entries"].size(), 2u);
  EXPECT_EQ(profile["entries"][0]["configuration"]["micro_batch"], 1);
  EXPECT_EQ(profile["entries"][1]["configuration"]["micro_batch"], 2);
  EXPECT_EQ(profile["machines"].size(), 2u) << "each run's measurement of the machine";

  const ProgramResult llama = run_program("sweep",
                                          "--device cpu --models llama-tiny --warmup-steps 0 --num-steps 2 "
                                          "--batch-sizes 1 --seq-lengths 32 --output-dir " +
                                              other_model.path().string());
  ASSERT_EQ(llama.exit_code, 0) << llama.output;
  TempDir refused;
  const ProgramResult mixed =
      run_program("sweep", "--gather " + first.path().string() + " " + other_model.path().string() + " --output-dir " +
                               refused.path().string());
  EXPECT_EQ(mixed.exit_code, 2) << mixed.output;
  EXPECT_NE(mixed.output.find("model"), std::string::npos) << mixed.output;
  EXPECT_FALSE(fs::exists(refused.path() / "profiles"));

  // Another build's profile of the same model.
  const fs::path file = second.path() / "profiles" / "gpt2-tiny" / "CPU" / "profile.json";
  Json doctored = read_json(file);
  doctored["code_version"] = "0000000";
  std::ofstream(file) << doctored.dump(2);
  const ProgramResult versions =
      run_program("sweep", "--gather " + first.path().string() + " " + second.path().string() + " --output-dir " +
                               refused.path().string());
  EXPECT_EQ(versions.exit_code, 2) << versions.output;
  EXPECT_NE(versions.output.find("code_version"), std::string::npos) << versions.output;
}

TEST(DeviceMemoryLimit, TrainRunsOutUnderTheCapAndSaysWhy) {
  const ProgramResult r = run_program("train",
                                      "--device cpu --model gpt2-tiny --num-steps 1 --seq-length 16 "
                                      "--device-memory-limit-gb 0.001");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--device-memory-limit-gb 0.001"), std::string::npos) << r.output;
  const ProgramResult bad = run_program("train", "--device cpu --model gpt2-tiny --device-memory-limit-gb nan");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--device-memory-limit-gb"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace zb::test
