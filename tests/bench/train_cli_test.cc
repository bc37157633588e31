// The train program as a user meets it: the per-step line, --help, and bad input refused with exit code 2
// and a message that names the flag, before any training.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <utility>

#include "bench/bench_record.h"
#include "core/strings.h"
#include "bench/chrome_trace.h"
#include "models/model_registry.h"
#include "models/parameter_layout.h"
#include "support/run_program.h"
#include "support/temp_dir.h"
#include "support/token_files.h"

namespace zb {
namespace {

using test::run_program;

TEST(TrainCli, PrintsOneLineAStep) {
  const auto r = run_program("train", "--device cpu --model llama-tiny --num-steps 3 --seq-length 16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::regex line(R"(step (\d+)/3 \| loss \d+\.\d{4} \| norm \d+\.\d{4} \| \d+\.\d ms \| \d+ tok/s)");
  int steps = 0;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line); it != std::sregex_iterator(); ++it)
    EXPECT_EQ(std::stoi((*it)[1]), ++steps);
  EXPECT_EQ(steps, 3) << r.output;
}

// --json writes the record zero_bench writes for a configuration: the same keys, this run's figures (its last
// loss as printed), one rank; an existing file is refused before training and left as it was.
TEST(TrainCli, JsonWritesTheComparisonProgramsRecord) {
  test::TempDir dir;
  const std::string path = (dir.path() / "run.json").string();
  const auto r = run_program("train",
                             "--device cpu --model gpt2-tiny --num-steps 4 --warmup-steps 1 --seq-length 16 "
                             "--batch-size 2 --json " +
                                 path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(path);
  ASSERT_TRUE(in) << r.output;
  const nlohmann::ordered_json records = nlohmann::ordered_json::parse(in);
  ASSERT_TRUE(records.is_array());
  ASSERT_EQ(records.size(), 1u);
  const nlohmann::ordered_json& record = records[0];
  std::vector<std::string> keys, expected;
  for (const auto& item : record.items()) keys.push_back(item.key());
  const nlohmann::ordered_json empty = to_json(BenchRecord{});  // (items() would not keep a temporary alive)
  for (const auto& item : empty.items()) expected.push_back(item.key());
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(record["status"], "ok");
  EXPECT_EQ(record["model"], "gpt2-tiny");
  EXPECT_EQ(record["batch_size"], 2);
  EXPECT_EQ(record["seq_length"], 16);
  EXPECT_EQ(record["world_size"], 1);
  EXPECT_EQ(record["per_rank"].size(), 1u);
  EXPECT_EQ(record["per_rank"][0]["rank"], 0);
  EXPECT_TRUE(record["p90_step_ms"].is_number());
  EXPECT_GT(record["throughput_tokens_per_sec"].get<double>(), 0.0);
  const std::smatch last = [&] {
    std::smatch m;
    std::regex_search(r.output, m, std::regex(R"(step 4/4 \| loss (\d+\.\d{4}))"));
    return m;
  }();
  ASSERT_EQ(last.size(), 2u) << r.output;
  EXPECT_NEAR(record["loss_last"].get<double>(), std::stod(last[1]), 5e-5);

  const auto again =
      run_program("train", "--device cpu --model gpt2-tiny --num-steps 1 --seq-length 16 --json " + path);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("--json: " + path + " exists"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("step 1/1"), std::string::npos) << "no training before the error";
  std::ifstream kept(path);
  EXPECT_EQ(nlohmann::ordered_json::parse(kept), records) << "the first record is left as it was";
}

// The backend options come from the environment; a bad value is bad input like a bad flag, and the variables
// the table no longer has are not read.
TEST(TrainCli, RefusesAnUnknownBackendOption) {
  const std::string train =
      std::string(ZB_BINARY_DIR) + "/train --device cpu --model gpt2-tiny --num-steps 1 --seq-length 16";
  for (const auto& [setting, message] :
       {std::pair<std::string, std::string>{"ZB_ATTENTION=fast",
                                            "ZB_ATTENTION=fast: accepted values are cudnn, own (default cudnn)"},
        {"ZB_GEMM_ALGORITHMS=best", "ZB_GEMM_ALGORITHMS=best: accepted values are timed, heuristic"},
        {"ZB_GEMM_EPILOGUES=all", "ZB_GEMM_EPILOGUES=all: accepted values are fused, kernels"},
        {"ZB_NORM_ROWS=threads", "ZB_NORM_ROWS=threads: accepted values are teams, warps"},
        {"ZB_PASS_RECORDING=on", "ZB_PASS_RECORDING=on: accepted values are graphs, eager"},
        {"ZB_LOG_LEVEL=loud", "ZB_LOG_LEVEL=loud: accepted values are debug, info, warn, error (default info)"}}) {
    const auto r = test::run_command(setting + " " + train);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step 1/1"), std::string::npos) << "no training before the error";
  }
  for (const char* setting : {"ZB_ATTENTION=own", "ZB_GEMM_ALGORITHMS=heuristic", "ZB_GEMM_EPILOGUES=kernels",
                              "ZB_NORM_ROWS=warps", "ZB_PASS_RECORDING=eager", "ZB_LOG_LEVEL=error"}) {
    const auto r = test::run_command(std::string(setting) + " " + train);
    EXPECT_EQ(r.exit_code, 0) << setting << "\n" << r.output;
  }
}

// --help lists the backend options' table: every variable, its values and its default.
TEST(TrainCli, HelpListsTheBackendOptions) {
  const auto r = run_program("train", "--help");
  ASSERT_EQ(r.exit_code, 0);
  for (const char* entry :
       {"ZB_ATTENTION=cudnn|own (default cudnn)", "ZB_GEMM_ALGORITHMS=timed|heuristic (default timed)",
        "ZB_GEMM_EPILOGUES=fused|kernels (default fused)", "ZB_NORM_ROWS=teams|warps (default teams)",
        "ZB_PASS_RECORDING=graphs|eager (default graphs)", "ZB_LOG_LEVEL=debug|info|warn|error (default info)"})
    EXPECT_NE(r.output.find(entry), std::string::npos) << entry << "\n" << r.output;
}

TEST(TrainCli, HelpListsEveryFlagWithItsDefault) {
  const auto r = run_program("train", "--help");
  ASSERT_EQ(r.exit_code, 0);
  for (const char* flag : {"--model", "--batch-size", "--seq-length", "--num-steps", "--lr", "--optimizer", "--seed",
                           "--data", "--device", "--grad-accum"})
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  EXPECT_NE(r.output.find("(=gpt2)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(=adamw)"), std::string::npos) << r.output;
}

struct BadInput {
  const char* arguments;
  const char* expected;  // a part of the message: the flag and what it accepts
};

class TrainCliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(TrainCliBadInput, ExitsWithCode2AndNamesTheFlag) {
  // A tiny model and one step, so that input wrongly accepted shows up as a finished step, not a long run.
  const std::string arguments = GetParam().arguments;
  const std::string model = arguments.find("--model") == std::string::npos ? "--model gpt2-tiny " : "";
  const auto r = run_program("train", model + "--num-steps 1 " + arguments);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(GetParam().expected), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step 1/1"), std::string::npos) << "no training before the error";
}

INSTANTIATE_TEST_SUITE_P(
    Flags, TrainCliBadInput,
    ::testing::Values(
        BadInput{"--model gpt5", "--model: unknown model 'gpt5'"}, BadInput{"--model gpt5", "llama-tiny"},
        BadInput{"--optimizer lion",
                 "--optimizer: unknown optimizer 'lion' (accepted: adamw, adam, sgd, adamw8bit, adam8bit)"},
        BadInput{"--optimizer sgd8bit", "--optimizer: unknown optimizer 'sgd8bit' (8-bit moments are Adam's"},
        BadInput{"--batch-size 0", "--batch-size: must be an integer in [1, "},
        BadInput{"--batch-size 1152921504606846976", "--batch-size: must be an integer in [1, "},
        BadInput{"--batch-size 100000000 --seq-length 64", "tokens per micro-batch"},
        BadInput{"--momentum nan", "--momentum: must be a number in [0, "},
        BadInput{"--grad-clip nan", "--grad-clip: must be a number"},
        BadInput{"--lr inf", "--lr: must be a non-zero number"}, BadInput{"--lr 1e-50", "that fp32 can hold"},
        BadInput{"--weight-decay -5", "--weight-decay: must be a number in [0, "},
        BadInput{"--seed -1", "--seed: must be a non-negative integer"},
        BadInput{"--batch-size many", "'--batch-size' is invalid"},
        BadInput{"--model gpt2-tiny --seq-length 4096", "--seq-length: 4096 exceeds gpt2-tiny's maximum of 64"},
        BadInput{"--model gpt2-tiny --seq-length 0", "--seq-length: must be a positive integer, got 0"},
        BadInput{"--device tpu", "--device: unknown device 'tpu' (accepted: cpu, cuda, cuda:N)"},
        BadInput{"--lr 0", "--lr: must be a non-zero number"}, BadInput{"--grad-clip -1", "--grad-clip"},
        BadInput{"--data '/nonexistent/shard_*.bin'", "--data: no file matches"},
        BadInput{"--data-format npy", "--data-format: unknown format 'npy' (accepted: llmc, raw)"},
        BadInput{"--activation-checkpointing partial",
                 "--activation-checkpointing: unknown activation checkpointing 'partial' (accepted: none, full, "
                 "selective)"},
        BadInput{"--no-such-flag", "unrecognised option '--no-such-flag'"},
        BadInput{"--device cpu --dtype fp16", "--dtype fp16: the CPU backend computes in fp32"},
        BadInput{"--dtype fp8", "--dtype: unknown dtype 'fp8' (accepted: fp32, bf16, fp16)"},
        BadInput{"--device cpu --loss-scale 128", "--loss-scale: loss scaling is for --dtype fp16"},
        BadInput{"--device cpu --hysteresis 3", "--hysteresis: loss scaling is for --dtype fp16"},
        BadInput{"--device cpu --offload cpu_optimizer --offload-ratio 1.5",
                 "--offload-ratio: must be a fraction in (0, 1], got 1.5"},
        BadInput{"--device cpu --offload cpu_optimizer --offload-ratio 0", "--offload-ratio: must be"},
        BadInput{"--device cpu --offload cpu_full --offload-ratio 0.5",
                 "--offload-ratio: 0.5 keeps part of the optimizer state on the GPU"},
        BadInput{"--device cpu --offload-ratio 0.5", "accepted with cpu_optimizer and nvme; none takes 1"},
        BadInput{"--lora-rank -1", "--lora-rank: must be an integer in [0, 64] for gpt2-tiny (0: off), got -1"},
        BadInput{"--lora-rank 65", "--lora-rank: must be an integer in [0, 64]"},
        BadInput{"--lora-alpha 8", "--lora-alpha: needs --lora-rank above 0"},
        BadInput{"--lora-targets mlp", "--lora-targets: needs --lora-rank above 0"},
        BadInput{"--lora-rank 4 --lora-alpha 0", "--lora-alpha: must be a non-zero number"},
        BadInput{"--lora-rank 4 --lora-dropout 1", "--lora-dropout: must be a probability in [0, 1), got 1"},
        BadInput{"--lora-rank 4 --lora-targets ffn",
                 "--lora-targets: unknown LoRA targets 'ffn' (attention, mlp or all)"},
        BadInput{"--profile-schedule active=2", "--profile-schedule: needs --profile-dir DIR"},
        BadInput{"--profile-dir /tmp --profile-schedule active=0", "--profile-schedule: 'active' is 0"},
        BadInput{"--profile-dir /tmp --profile-schedule warmup=1,warmup=2", "'warmup' given twice"},
        BadInput{"--profile-dir /proc/no/such", "--profile-dir /proc/no/such: cannot be created as a folder"}),
    [](const auto& param_info) { return "case" + std::to_string(param_info.index); });

// A Mistral config.json trains as Llama's block on the CPU backend, within its sliding window and beyond it (a band
// of keys): the first loss equals the same model's without a window up to the window's length and differs beyond
// it. Beyond its maximum the sequence is refused before any work.
TEST(TrainCli, MistralTrainsWithinAndBeyondItsSlidingWindow) {
  namespace fs = std::filesystem;
  test::TempDir dir;
  const std::string fields = R"("model_type": "mistral", "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 64, "rope_theta": 1000000.0, "hidden_act": "silu")";
  const fs::path windowed = dir.path() / "windowed", plain = dir.path() / "plain";
  fs::create_directories(windowed);
  fs::create_directories(plain);
  std::ofstream(windowed / "config.json") << "{" << fields << R"(, "sliding_window": 16})";
  std::ofstream(plain / "config.json") << "{" << fields << R"(, "sliding_window": null})";
  auto first_loss = [&](const fs::path& model, int seq) {
    const std::string json = (dir.path() / cat(model.filename().string(), seq, ".json")).string();
    const auto r = run_program("train", cat("--model ", model.string(), " --device cpu --num-steps 1 --batch-size 2 ",
                                            "--seq-length ", seq, " --json ", json));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("sliding window 16") != std::string::npos, model == windowed) << r.output;
    std::ifstream in(json);
    return in ? nlohmann::ordered_json::parse(in)[0].value("loss_first", -1.0) : -1.0;
  };
  EXPECT_EQ(first_loss(windowed, 16), first_loss(plain, 16)) << "within the window: plain causal attention";
  const double banded = first_loss(windowed, 40), causal = first_loss(plain, 40);
  EXPECT_GT(banded, 0);
  EXPECT_NE(banded, causal) << "beyond the window the band changes the attention";
  const auto beyond =
      run_program("train", "--model " + windowed.string() + " --device cpu --num-steps 1 --seq-length 65");
  EXPECT_EQ(beyond.exit_code, 2) << beyond.output;
  EXPECT_NE(beyond.output.find("--seq-length: 65 exceeds"), std::string::npos) << beyond.output;
}

// A Gemma 3 config.json (the multimodal wrapper, whose text model is trained) trains on the CPU backend beyond its
// window and with an attention scale of its own, both of which the GPU's attention does not compute yet.
TEST(TrainCli, Gemma3TrainsFromItsConfigJsonOnTheCpu) {
  test::TempDir dir;
  std::ofstream(dir.path() / "config.json") << R"({"model_type": "gemma3", "text_config": {"head_dim": 32,
    "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 64, "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "query_pre_attn_scalar": 24, "sliding_window": 8,
    "sliding_window_pattern": 2, "vocab_size": 256}, "vision_config": {"model_type": "siglip_vision_model"}})";
  const auto r = run_program("train", cat("--model ", dir.path().string(), " --device cpu --num-steps 2 ",
                                          "--batch-size 2 --seq-length 24 --activation-checkpointing selective"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"GeGLU", "tied embeddings", "sliding window 8 in 1 of 2 layers", "q/k norms", "post-norms",
                           "attention scale 24^-0.5", "step 2/2"}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " in " << r.output;
  }
}

// LoRA's record: the adapters, the parameters trained, and the gradients and optimizer state of the adapters
// alone, as predicted (gpt2-tiny's attention adapters at rank 4 fill their units without padding).
TEST(TrainCli, LoraRecordsTheAdaptersAndTheirMemory) {
  test::TempDir dir;
  const std::string path = (dir.path() / "lora.json").string();
  const auto r = run_program("train",
                             "--device cpu --model gpt2-tiny --num-steps 2 --seq-length 16 --lora-rank 4 --json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA rank 4 alpha 8 on attention (0.003072M trained, the rest frozen)"), std::string::npos)
      << r.output;
  std::ifstream in(path);
  const nlohmann::ordered_json record = nlohmann::ordered_json::parse(in)[0];
  EXPECT_EQ(record["lora"], "rank 4, alpha 8, attention");
  EXPECT_EQ(record["trainable_parameters"], 2 * (4 * (64 + 192) + 4 * (64 + 64)));
  EXPECT_EQ(record["frozen_parameters"], ParameterLayout(resolve_model("gpt2-tiny")).total_numel())
      << "the base model's weights";
  EXPECT_DOUBLE_EQ(record["gradients_gb"].get<double>(), record["predicted_gradients_gb"].get<double>());
  EXPECT_DOUBLE_EQ(record["optimizer_state_gb"].get<double>(), record["predicted_optimizer_state_gb"].get<double>());
  EXPECT_DOUBLE_EQ(record["gradients_gb"].get<double>(), 3072 * 4 / 1e9) << "fp32 gradients of the adapters";
}

// 1000 ids below 256, for gpt2-tiny.
std::vector<uint16_t> shard_ids() {
  std::vector<uint16_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = uint16_t(i * 7 % 256);
  return ids;
}

TEST(TrainCli, TrainsOnTokenFilesAndRefusesABadOne) {
  test::TempDir dir;
  const std::string arguments =
      "--device cpu --model gpt2-tiny --num-steps 2 --seq-length 16 --data '" + (dir / "shard_*.bin") + "'";
  test::write_shard(dir / "shard_000.bin", shard_ids());
  const auto ok = run_program("train", arguments);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("1 token file(s)"), std::string::npos) << ok.output;

  test::write_shard(dir / "shard_000.bin", shard_ids(), 20240520, 1, 5000);  // claims more than it holds
  const auto bad = run_program("train", arguments);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--data: token file"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("truncated"), std::string::npos) << bad.output;
}

// --profile-dir on the CPU backend: the schedule's window (steps 3-4 of 5: skip 1, wait 0, warm up 1, record 2)
// gives the three files; the trace parses as JSON (Chrome's trace event format) and holds the steps as
// ProfilerStep#3 and #4 with every other slice inside one of them; the summary's exposed times sum to each step
// (within its printed rounding) and name the bottleneck; the record carries them. Without --profile-dir nothing
// is traced and the record's profile fields are empty.
TEST(TrainCli, ProfileDirWritesTheWindowsTraceSummaryAndTimeline) {
  test::TempDir dir;
  const std::string folder = (dir.path() / "profile").string(), json = (dir.path() / "run.json").string();
  const auto r = run_program("train",
                             "--device cpu --model gpt2-tiny --num-steps 5 --seq-length 16 --batch-size 2 "
                             "--profile-dir " + folder + " --profile-schedule skip_first=1,warmup=1,active=2,repeat=1 "
                             "--json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto file = [&](const char* kind, const char* extension) {
    return folder + "/" + kind + "_train_steps3-4_rank0" + extension;
  };
  const nlohmann::json trace = nlohmann::json::parse(read_gzip_file(file("trace", ".json.gz")));
  std::vector<std::pair<double, double>> steps;
  std::vector<std::string> step_names;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "step") {
      steps.push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
      step_names.push_back(e["name"]);
    }
  }
  EXPECT_EQ(step_names, (std::vector<std::string>{"ProfilerStep#3", "ProfilerStep#4"}));
  int inside = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] == "step") continue;
    const double start = e["ts"], end = start + e["dur"].get<double>();
    const bool in_a_step = std::any_of(steps.begin(), steps.end(), [&](const auto& s) {
      return start >= s.first - 1e-3 && end <= s.second + 1e-3;
    });
    EXPECT_TRUE(in_a_step) << e.dump();
    inside += in_a_step;
  }
  EXPECT_GT(inside, 20) << "the ops of two steps";

  std::ifstream summary_file(file("profile", ".txt"));
  const std::string summary((std::istreambuf_iterator<char>(summary_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(summary.find("matmul_forward"), std::string::npos) << summary;
  EXPECT_NE(summary.find("bottleneck: compute"), std::string::npos) << summary;
  EXPECT_NE(r.output.find("bottleneck: compute"), std::string::npos) << "printed too";
  const std::regex step_line(R"(ProfilerStep#(\d) +([0-9.]+)((?: +[0-9.]+){6}))");
  int lines = 0;
  for (auto it = std::sregex_iterator(summary.begin(), summary.end(), step_line); it != std::sregex_iterator(); ++it) {
    std::istringstream parts((*it)[3].str());
    double part = 0, sum = 0;
    while (parts >> part) sum += part;
    EXPECT_NEAR(sum, std::stod((*it)[2]), 0.01 * std::stod((*it)[2]) + 0.004) << (*it)[0];
    ++lines;
  }
  EXPECT_EQ(lines, 2) << summary;
  std::ifstream timeline(file("timeline", ".svg"));
  std::string svg((std::istreambuf_iterator<char>(timeline)), std::istreambuf_iterator<char>());
  EXPECT_NE(svg.find("ProfilerStep#4"), std::string::npos) << "the window's last step";

  std::ifstream in(json);
  const nlohmann::json record = nlohmann::json::parse(in)[0];
  EXPECT_EQ(record["profile_steps"], "3-4");
  EXPECT_EQ(record["profile_bottleneck"], "compute");
  double exposed = 0;
  for (const char* key : {"exposed_compute_ms", "exposed_collectives_ms", "exposed_copies_ms",
                          "exposed_cpu_optimizer_ms", "exposed_nvme_ms", "exposed_idle_ms"})
    exposed += record[key].get<double>();
  const double traced_step = ((steps[0].second - steps[0].first) + (steps[1].second - steps[1].first)) / 2e3;
  EXPECT_NEAR(exposed, traced_step, 0.01 * traced_step) << "the exposed parts sum to the traced step";
  EXPECT_GT(record["exposed_compute_ms"].get<double>(), 0.5 * exposed);
}

TEST(TrainCli, WithoutProfileDirNothingIsTraced) {
  test::TempDir dir;
  const std::string json = (dir.path() / "run.json").string();
  const auto r = run_program("train", "--device cpu --model gpt2-tiny --num-steps 2 --seq-length 16 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("bottleneck"), std::string::npos);
  std::ifstream in(json);
  const nlohmann::json record = nlohmann::json::parse(in)[0];
  EXPECT_TRUE(record["exposed_compute_ms"].is_null());
  EXPECT_EQ(record["profile_steps"], "");
}

}  // namespace
}  // namespace zb
