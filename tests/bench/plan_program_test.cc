// `plan` end to end on the CPU backend: a profile gathered from sweeps of gpt2-tiny on one rank and on two, then
// --validate against those sweeps' records (the memory predicted to the byte: the engine's own plan), a plan for a
// node of two, and the bad input that must exit 2 before any work.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/deepspeed_config.h"
#include "engine/memory_plan.h"
#include "models/model_registry.h"
#include "support/program_outputs.h"
#include "support/run_program.h"
#include "support/temp_dir.h"

namespace zb::test {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const std::string kSweep =
    "--device cpu --models gpt2-tiny --batch-sizes 2 --seq-lengths 32 --warmup-steps 0 --num-steps 4 ";

// The sweeps and the gathered profile, made once for the suite.
class PlanProgram : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // (No test is running yet, so not a TempDir, which names its folder after the test.)
    dir_ = new fs::path(fs::temp_directory_path() / ("zb_plan_program_" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const ProgramResult one =
        run_program("sweep", kSweep + "--stages 0 3 --strategies none --output-dir " + ((*dir_) / "one").string());
    ASSERT_EQ(one.exit_code, 0) << one.output;
    const ProgramResult offload = run_program(
        "sweep", kSweep + "--stages 1 --strategies cpu_optimizer --output-dir " + ((*dir_) / "one").string());
    ASSERT_EQ(offload.exit_code, 0) << offload.output;
    const ProgramResult two =
        run_job("sweep",
                kSweep + "--stages 0 1 2 3 --strategies none cpu_optimizer --output-dir " + ((*dir_) / "two").string());
    ASSERT_EQ(two.exit_code, 0) << two.output;
    const ProgramResult gathered =
        run_program("sweep", "--gather " + ((*dir_) / "one").string() + " " + ((*dir_) / "two").string() +
                                 " --output-dir " + ((*dir_) / "gathered").string());
    ASSERT_EQ(gathered.exit_code, 0) << gathered.output;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  // plan of global batch 8 on a node of two (the profile's all-reduce rate) with `flags`, its files in `out`.
  static ProgramResult plan_node(const TempDir& out, const std::string& flags) {
    return run_program("plan", "--profile " + profile() + " --gpus-per-node 2 --global-batch-size 8 " + flags +
                                   " --output-dir " + out.path().string());
  }
  static std::string profile() { return ((*dir_) / "gathered/profiles/gpt2-tiny/CPU/profile.json").string(); }
  static std::string records() {
    std::string files;
    for (const char* run : {"one", "two"})
      for (const auto& entry : fs::directory_iterator((*dir_) / run))
        if (entry.path().extension() == ".json" && entry.path().filename().string().rfind("sweep_", 0) == 0)
          files.append(" ").append(entry.path().string());
    return files;
  }

  // Copies of every record file in `dir` with `change` applied to each record (named after the run's folder too: the
  // two runs' files may share a name); the list, as records() gives it.
  static std::string changed_records(const TempDir& dir, const std::string& prefix,
                                     const std::function<void(Json&)>& change) {
    std::string files;
    std::istringstream listed(records());
    for (std::string file; listed >> file;) {
      Json records = read_json(file);
      for (Json& record : records) change(record);
      const fs::path copy = dir.path() / (prefix + "_" + fs::path(file).parent_path().filename().string() + "_" +
                                          fs::path(file).filename().string());
      std::ofstream(copy) << records.dump();
      files.append(" ").append(copy.string());
    }
    return files;
  }
  // The cells of the table row that starts with `label`, trimmed (none where there is no such row).
  static std::vector<std::string> row_cells(const std::string& output, const std::string& label) {
    std::vector<std::string> cells;
    const size_t row = output.find(label);
    if (row == std::string::npos) return cells;
    std::istringstream line(output.substr(row, output.find('\n', row) - row));
    for (std::string cell; std::getline(line, cell, '|');) {
      const size_t first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
      cells.push_back(first == std::string::npos ? std::string() : cell.substr(first, last - first + 1));
    }
    return cells;
  }

  static fs::path* dir_;
};

fs::path* PlanProgram::dir_ = nullptr;

// An offload entry's host update is also kept over the timed steps (the steps step_ms is of), from the record; the
// planner takes it, so a one-GPU basis subtracts its own steps' update.
TEST_F(PlanProgram, OffloadEntriesCarryTheTimedStepsHostUpdate) {
  const Json profile = read_json(PlanProgram::profile());
  std::map<std::pair<int64_t, int64_t>, double> timed;  // (world, stage) -> the record's host update
  std::istringstream files(records());
  for (std::string file; files >> file;) {
    for (const Json& record : read_json(file)) {
      if (record.at("strategy") == "cpu_optimizer")
        timed[{record.at("world_size"), record.at("stage")}] = record.at("offload_cpu_optimizer_ms");
    }
  }
  int offload_entries = 0;
  for (const Json& entry : profile.at("entries")) {
    const Json& c = entry.at("configuration");
    const Json& host_update = entry.at("optimizer").at("timed_cpu_ms");
    if (c.at("strategy") != "cpu_optimizer") {
      EXPECT_TRUE(host_update.is_null()) << c.dump();
      continue;
    }
    ++offload_entries;
    ASSERT_TRUE(timed.count({c.at("world_size"), c.at("stage")})) << c.dump();
    EXPECT_EQ(host_update.get<double>(), (timed[{c.at("world_size"), c.at("stage")}])) << c.dump();
    EXPECT_GT(host_update.get<double>(), 0);
  }
  EXPECT_EQ(offload_entries, 5) << "one rank stage 1; two ranks stages 0-3";
}

TEST_F(PlanProgram, ValidatesEveryRecordWithTheMemoryToTheByte) {
  const ProgramResult r = run_program("plan", "--profile " + profile() + " --validate" + records());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 3 one-rank configurations and 8 on two ranks (stages 0-3 x none and cpu_optimizer), each a row.
  EXPECT_NE(r.output.find("11 configuration(s) predicted"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 GPUs, stage 3, cpu_optimizer, micro-batch 2 x 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("peak memory: median error 0.00%, worst 0.00%; 0 configuration(s) that ran out of memory "
                          "called fitting"),
            std::string::npos)
      << r.output;
  // One rank's step is its own basis: predicted as measured (Configuration | Status | Step (measured) | Step
  // (predicted) | Error | ...).
  const std::vector<std::string> cells = row_cells(r.output, "1 GPU, stage 0, none, micro-batch 2 x 1");
  ASSERT_GE(cells.size(), 5u) << r.output;
  EXPECT_EQ(cells[4], "+0.0%");
  EXPECT_NE(r.output.find("step time: median error"), std::string::npos);
}

// Repeats of a configuration (the same records again, their steps 2x and 10x as long) are one row, compared at the
// median run: a one-rank basis, predicted as its first run measured, is then 50% under (the mean would give 77%).
TEST_F(PlanProgram, ComparesRepeatsAtTheirMedianRun) {
  TempDir dir;
  std::string repeats;
  for (const double factor : {2.0, 10.0}) {
    repeats += changed_records(dir, std::to_string(int(factor)) + "x", [&](Json& record) {
      if (record.at("status") != "ok") return;
      record["avg_step_time_ms"] = record.at("avg_step_time_ms").get<double>() * factor;
    });
  }
  const ProgramResult r = run_program("plan", "--profile " + profile() + " --validate" + records() + repeats);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("11 configuration(s) predicted"), std::string::npos) << r.output;
  const std::vector<std::string> cells = row_cells(r.output, "1 GPU, stage 0, none, micro-batch 2 x 1");
  ASSERT_EQ(cells.size(), 9u) << r.output;
  EXPECT_EQ(cells[4], "-50.0%") << r.output;
  EXPECT_EQ(cells[8].substr(0, 3), "3 (") << "three runs and their range: " << r.output;
}

// Records that differ in what the label leaves out (here the sequence length) are not repeats: each keeps its row,
// its label naming the length.
TEST_F(PlanProgram, KeepsConfigurationsOfAnotherSequenceLengthApart) {
  TempDir dir;
  const std::string longer = changed_records(dir, "seq64", [](Json& record) { record["seq_length"] = 64; });
  const ProgramResult r = run_program("plan", "--profile " + profile() + " --validate" + records() + longer);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("22 configuration(s) predicted"), std::string::npos) << r.output;
  EXPECT_EQ(row_cells(r.output, "1 GPU, stage 0, none, micro-batch 2 x 1, seq 32 ").size(), 9u) << r.output;
  EXPECT_EQ(row_cells(r.output, "1 GPU, stage 0, none, micro-batch 2 x 1, seq 64 ").size(), 9u) << r.output;
}

TEST_F(PlanProgram, PlansANodeAndWritesEveryConfigurationAndTheBestAsADeepSpeedConfig) {
  TempDir out;
  const ProgramResult r = plan_node(out, "--gpu-memory-gb 1 --min-headroom-gb 0.5 --gpu-hour-usd 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("plan: gpt2-tiny on 1 x 2 CPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("best: "), std::string::npos) << r.output;
  const Json doc = read_json(only_file(out.path(), "plan_", ".json"));
  const Json& plans = doc.at("plans");
  // Micro-batches 1, 2 and 4 (accumulation 4, 2, 1) x checkpointing none and full x stages 0-3 with none, stages
  // 1-3 with cpu_optimizer: 3 x 2 x 7.
  EXPECT_EQ(plans.size(), 42u);
  const Json& best = plans.at(0);
  EXPECT_TRUE(best.at("fits").get<bool>());
  for (const Json& p : plans) {
    if (!p.contains("tokens_per_sec") || !p.at("fits").get<bool>()) continue;
    EXPECT_LE(p.at("tokens_per_sec").get<double>(), best.at("tokens_per_sec").get<double>()) << p.dump();
  }
  // The best's memory is the engine's plan of it on two ranks (the CPU backend keeps no workspace of its own).
  TrainingOptions o;
  o.model = resolve_model("gpt2-tiny");
  o.batch = best.at("micro_batch").get<int64_t>();
  o.grad_accum = best.at("grad_accum").get<int64_t>();
  o.seq = 32;
  o.zero.stage = best.at("stage").get<int>();
  o.offload = parse_offload_strategy(best.at("strategy").get<std::string>());
  o.activation_checkpointing = parse_activation_checkpointing(best.at("activation_checkpointing").get<std::string>());
  EXPECT_DOUBLE_EQ(best.at("gpu_memory_gb").at("engine_peak").get<double>(), double(plan_memory(o, 0, 2).peak) / 1e9);
  EXPECT_GT(best.at("cost_per_1000_samples_usd").get<double>(), 0);
  // The CSV has a row a plan; the DeepSpeed config is the best's, and DeepSpeed's reader takes it.
  const std::string csv = read_text(only_file(out.path(), "plan_", ".csv"));
  EXPECT_EQ(size_t(std::count(csv.begin(), csv.end(), '\n')), plans.size() + 1);
  const DeepSpeedConfig ds = read_deepspeed_config(only_file(out.path(), "ds_config_planned_", ".json").string());
  EXPECT_EQ(*ds.stage, best.at("stage").get<int>());
  EXPECT_EQ(*ds.micro_batch, o.batch);
  EXPECT_EQ(*ds.grad_accum, o.grad_accum);
}

TEST_F(PlanProgram, PlansALargerModelOfTheFamilyFromTheProfile) {
  TempDir out;
  const ProgramResult r = plan_node(out, "--model gpt2 --gpu-memory-gb 80");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("plan: gpt2 on 1 x 2 CPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("scaled from gpt2-tiny"), std::string::npos) << r.output;
  const Json doc = read_json(only_file(out.path(), "plan_", ".json"));
  EXPECT_EQ(doc.at("model"), "gpt2");
  EXPECT_EQ(doc.at("profiled_model"), "gpt2-tiny");
}

// What the plan calls fitting on a device of C GB fits when trained under that cap, and what it does not runs out:
// C between the peaks of micro-batch 2 x 2 and micro-batch 4 x 1 (stage 0, one rank).
TEST_F(PlanProgram, FitsWhatTrainingFitsUnderTheSameCap) {
  TempDir all, capped;
  const std::string one_gpu = "--profile " + profile() + " --gpus-per-node 1 --global-batch-size 4 ";
  ASSERT_EQ(run_program("plan", one_gpu + "--gpu-memory-gb 80 --output-dir " + all.path().string()).exit_code, 0);
  std::map<int64_t, double> peak_gb;  // stage 0, no offload, no checkpointing: by micro-batch
  const Json planned = read_json(only_file(all.path(), "plan_", ".json"));
  for (const Json& p : planned.at("plans")) {
    if (p.at("stage") == 0 && p.at("strategy") == "none" && p.at("activation_checkpointing") == "none")
      peak_gb[p.at("micro_batch").get<int64_t>()] = p.at("gpu_memory_gb").at("total").get<double>();
  }
  ASSERT_TRUE(peak_gb.count(2) && peak_gb.count(4));
  ASSERT_LT(peak_gb[2], peak_gb[4]);
  const std::string cap = std::to_string((peak_gb[2] + peak_gb[4]) / 2);
  ASSERT_EQ(run_program("plan", one_gpu + "--gpu-memory-gb " + cap + " --min-headroom-gb 0 --output-dir " +
                                    capped.path().string())
                .exit_code,
            0);
  const Json planned_capped = read_json(only_file(capped.path(), "plan_", ".json"));
  for (const Json& p : planned_capped.at("plans")) {
    if (p.at("stage") != 0 || p.at("strategy") != "none" || p.at("activation_checkpointing") != "none") continue;
    const int64_t micro = p.at("micro_batch").get<int64_t>();
    if (micro != 2 && micro != 4) continue;
    EXPECT_EQ(p.at("fits").get<bool>(), micro == 2) << p.dump();
    const ProgramResult trained = run_program(
        "train", "--device cpu --model gpt2-tiny --seq-length 32 --num-steps 2 --warmup-steps 0 --batch-size " +
                     std::to_string(micro) + " --grad-accum " + std::to_string(4 / micro) +
                     " --device-memory-limit-gb " + cap);
    if (micro == 2) {
      EXPECT_EQ(trained.exit_code, 0) << trained.output;
    } else {
      EXPECT_NE(trained.exit_code, 0) << trained.output;
      EXPECT_NE(trained.output.find("out of host memory"), std::string::npos) << trained.output;  // (the CPU's device)
    }
  }
}

TEST_F(PlanProgram, SaysWhyNothingFitsOnATinyGpu) {
  TempDir out;
  const ProgramResult r = plan_node(out, "--gpu-memory-gb 0.001 --min-headroom-gb 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no configuration fits"), std::string::npos) << r.output;
  const Json doc = read_json(only_file(out.path(), "plan_", ".json"));
  EXPECT_NE(doc.at("plans").at(0).at("why_not").get<std::string>().find("of the GPU's 1.00 MB"), std::string::npos);
  for (const auto& entry : fs::directory_iterator(out.path()))
    EXPECT_EQ(entry.path().filename().string().rfind("ds_config", 0), std::string::npos) << entry.path();
}

struct BadPlan {
  std::string arguments, expected;
};

void PrintTo(const BadPlan& c, std::ostream* os) {
  *os << c.arguments;
}

class PlanBadInput : public PlanProgram, public ::testing::WithParamInterface<BadPlan> {};

TEST_P(PlanBadInput, ExitsTwoNamingTheFlag) {
  TempDir out;
  std::string arguments = GetParam().arguments;
  for (std::string token : {std::string("PROFILE"), std::string("OUT")}) {
    const size_t at = arguments.find(token);
    if (at != std::string::npos)
      arguments.replace(at, token.size(), token == "PROFILE" ? profile() : out.path().string());
  }
  const ProgramResult r = run_program("plan", arguments);
  EXPECT_EQ(r.exit_code, 2) << arguments << "\n" << r.output;
  EXPECT_NE(r.output.find(GetParam().expected), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Flags, PlanBadInput,
    ::testing::Values(
        BadPlan{"--gpus-per-node 2 --global-batch-size 8", "--profile is required"},
        BadPlan{"--profile /nonexistent/profile.json --gpus-per-node 2 --global-batch-size 8", "cannot be read"},
        BadPlan{"--profile PROFILE --gpus-per-node 2 --nodes 4 --global-batch-size 64 --gpu-memory-gb 1",
                "--inter-node-gbps and --inter-node-latency-us"},
        BadPlan{"--profile PROFILE --global-batch-size 8 --gpu-memory-gb 1", "--gpus-per-node"},
        BadPlan{"--profile PROFILE --gpus-per-node 2 --global-batch-size 0 --gpu-memory-gb 1", "--global-batch-size"},
        BadPlan{"--profile PROFILE --gpus-per-node 2 --global-batch-size 7 --gpu-memory-gb 1", "does not divide"},
        BadPlan{"--profile PROFILE --gpus-per-node 2 --global-batch-size 8", "--gpu-memory-gb"},
        BadPlan{"--profile PROFILE --gpus-per-node 2 --global-batch-size 8 --gpu-memory-gb 1 --seq-length 4096",
                "--seq-length"},
        BadPlan{"--profile PROFILE --validate /nonexistent.json", "--validate /nonexistent.json: cannot be read"},
        BadPlan{"--profile PROFILE --gpus-per-node 2 --nodes 2 --global-batch-size 8 --gpu-memory-gb 1 "
                "--inter-node-gbps 0 --inter-node-latency-us 5",
                "--inter-node-gbps must be above 0"},
        BadPlan{"--profile PROFILE --gpus-per-node 2 --nodes 2 --global-batch-size 8 --gpu-memory-gb 1 "
                "--inter-node-gbps 50 --inter-node-latency-us -1",
                "--inter-node-latency-us must be at least 0"},
        BadPlan{"--profile PROFILE --gpus-per-node 2 --nodes 0 --global-batch-size 8 --gpu-memory-gb 1", "--nodes"},
        BadPlan{"--profile PROFILE --gpus-per-node 0 --global-batch-size 8 --gpu-memory-gb 1", "--gpus-per-node"},
        BadPlan{"--profile PROFILE --gpus-per-node 2 --global-batch-size 8 --gpu-memory-gb -1", "--gpu-memory-gb"},
        BadPlan{"--profile PROFILE --gpus-per-node 2 --global-batch-size 8 --gpu-memory-gb 1 --seq-length 0",
                "--seq-length"},
        BadPlan{"--profile PROFILE --gpus-per-node 2 --global-batch-size 8 --gpu-memory-gb 1 --model llama-tiny",
                "--model llama-tiny is not of gpt2-tiny's family"},
        BadPlan{"--profile PROFILE --cluster /nonexistent.json --global-batch-size 8", "--cluster /nonexistent.json"}),
    [](const auto& param_info) { return "case" + std::to_string(param_info.index); });

}  // namespace
}  // namespace zb::test
