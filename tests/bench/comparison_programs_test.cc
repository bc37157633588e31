// zero_bench and offload_bench end to end on the CPU backend, as MPI jobs of 2 ranks (mpirun --oversubscribe)
// with the tiny models: every configuration runs; the JSON and CSV parse and hold every field; the chart and
// the recommended DeepSpeed config are written; a configuration forced out of memory is recorded as `oom`
// while the others succeed; regression mode fails on a doctored baseline and passes on the true one; bad input
// gives exit code 2 and a message naming the flag, and writes nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "bench/chrome_trace.h"
#include "support/program_outputs.h"
#include "support/run_program.h"
#include "support/temp_dir.h"
#include "support/token_files.h"

namespace zb::test {
namespace {

using Json = nlohmann::ordered_json;  // keeps the file's key order
namespace fs = std::filesystem;

// Every field the issue asks each record to hold.
const std::vector<std::string> kFields = {"stage",
                                          "strategy",
                                          "offload_ratio",
                                          "offloaded_share",
                                          "status",
                                          "error",
                                          "model",
                                          "parameters",
                                          "world_size",
                                          "batch_size",
                                          "seq_length",
                                          "grad_accum",
                                          "dtype",
                                          "activation_checkpointing",
                                          "optimizer",
                                          "avg_step_time_ms",
                                          "p50_step_ms",
                                          "p90_step_ms",
                                          "min_step_ms",
                                          "max_step_ms",
                                          "stddev_step_ms",
                                          "throughput_tokens_per_sec",
                                          "throughput_tokens_per_sec_per_gpu",
                                          "throughput_stddev",
                                          "samples_per_sec",
                                          "tflops_per_gpu",
                                          "mfu",
                                          "gpu_peak_gb",
                                          "gpu_allocated_gb",
                                          "parameters_gb",
                                          "gradients_gb",
                                          "optimizer_state_gb",
                                          "activations_gb",
                                          "predicted_parameters_gb",
                                          "predicted_gradients_gb",
                                          "predicted_optimizer_state_gb",
                                          "predicted_activations_gb",
                                          "cpu_memory_gb",
                                          "cpu_pinned_gb",
                                          "nvme_read_gb",
                                          "nvme_write_gb",
                                          "nvme_read_gbps",
                                          "nvme_write_gbps",
                                          "comm_bytes_per_step",
                                          "forward_ms",
                                          "backward_ms",
                                          "optimizer_ms",
                                          "exposed_comm_ms",
                                          "offload_to_host_ms",
                                          "offload_cpu_optimizer_ms",
                                          "offload_to_device_ms",
                                          "offload_speculation_kept_ms",
                                          "offload_speculation_discarded_ms",
                                          "loss_first",
                                          "loss_last",
                                          "cost_per_1000_samples_usd",
                                          "efficiency",
                                          "recommendation",
                                          "gpu_name",
                                          "gpu_count",
                                          "driver_version",
                                          "cuda_version",
                                          "nccl_version",
                                          "mpi_version",
                                          "host_name",
                                          "machine_name",
                                          "cloud_provider",
                                          "git_commit",
                                          "timestamp",
                                          "backend_options",
                                          "rank_step_spread_pct",
                                          "rank_busy_spread_pct",
                                          "slowest_rank",
                                          "rank_spread_note",
                                          "nodes",
                                          "node_throughput_min",
                                          "node_throughput",
                                          "per_rank"};

// The tiny model on the CPU, one warm-up step, and the timed steps.
std::string tiny_run(int timed_steps) {
  return "--device cpu --model gpt2-tiny --batch-size 2 --seq-length 32 --warmup-steps 1 --num-steps " +
         std::to_string(timed_steps);
}
const std::string kTiny = tiny_run(2);

// RFC 4180 lines into fields (quoted fields may hold commas and doubled quotes; no line breaks here).
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"')
        field += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(field), field.clear();
    } else if (c == '\n') {
      row.push_back(field), field.clear();
      rows.push_back(row), row.clear();
    } else if (c != '\r') {
      field += c;
    }
  }
  return rows;
}

void expect_every_field(const Json& records) {
  ASSERT_TRUE(records.is_array());
  for (const Json& record : records) {
    for (const std::string& field : kFields) EXPECT_TRUE(record.contains(field)) << field;
  }
}

TEST(ComparisonPrograms, ZeroBenchRunsEveryStageAndWritesEveryOutput) {
  TempDir out;
  const ProgramResult r =
      run_job("zero_bench", kTiny +
                                " --repeat 2 --gpu-hour-usd 2.5 --stage3-param-persistence-threshold 0 "
                                "--output-dir " +
                                out.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The CPU backend's memory is the device's, not a GPU's.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(Strategy +\| Device Mem +\| CPU Mem +\| Time +\| )"
                                                     R"(Throughput +\| Rank spread +\| Status +\| Recommendation)")))
      << r.output;
  EXPECT_EQ(r.output.find("GPU"), std::string::npos) << r.output;

  const Json records = read_json(only_file(out.path(), "zero_comparison_", ".json"));
  expect_every_field(records);
  ASSERT_EQ(records.size(), 4u);
  int optimal = -1;
  for (int stage = 0; stage < 4; ++stage) {
    const Json& record = records[size_t(stage)];
    SCOPED_TRACE(stage);
    EXPECT_EQ(record["stage"], stage);
    EXPECT_EQ(record["status"], "ok") << record["error"];
    EXPECT_EQ(record["world_size"], 2);
    EXPECT_GT(record["throughput_tokens_per_sec"].get<double>(), 0);
    EXPECT_NEAR(record["throughput_tokens_per_sec_per_gpu"].get<double>() * 2,
                record["throughput_tokens_per_sec"].get<double>(),
                1e-6 * record["throughput_tokens_per_sec"].get<double>());
    EXPECT_TRUE(record["throughput_stddev"].is_number()) << "two repeats give a standard deviation";
    EXPECT_GT(record["cost_per_1000_samples_usd"].get<double>(), 0);
    EXPECT_GT(record["gpu_peak_gb"].get<double>(), 0);
    EXPECT_TRUE(record["loss_first"].is_number() && record["loss_last"].is_number());
    if (record["recommendation"].get<std::string>().rfind("OPTIMAL", 0) == 0) {
      EXPECT_EQ(optimal, -1) << "one configuration is optimal";
      optimal = stage;
    }
    // Each rank's own figures; the record's memory is the largest of them, the hosts' throughput their sum.
    const Json& ranks = record["per_rank"];
    ASSERT_EQ(ranks.size(), 2u);
    double largest_peak = 0, sum = 0;
    for (int rank = 0; rank < 2; ++rank) {
      const Json& own = ranks[size_t(rank)];
      EXPECT_EQ(own["rank"], rank);
      EXPECT_EQ(own["host"], record["host_name"]);
      EXPECT_EQ(own["gpu_index"], -1) << "the CPU backend";
      EXPECT_EQ(own["gpu_name"], "CPU");
      EXPECT_GT(own["step_ms_mean"].get<double>(), 0);
      EXPECT_LE(own["step_ms_p50"].get<double>(), own["step_ms_p90"].get<double>());
      EXPECT_GT(own["busy_ms"].get<double>(), 0);
      EXPECT_LE(own["busy_ms"].get<double>(), own["step_ms_mean"].get<double>() * (1 + 1e-9));
      EXPECT_GT(own["host_rss_gb"].get<double>(), 0);
      EXPECT_TRUE(own["sm_clock_mhz_median"].is_null());
      EXPECT_EQ(own["telemetry_unavailable"], "no GPU");
      largest_peak = std::max(largest_peak, own["gpu_peak_gb"].get<double>());
      sum += own["tokens_per_sec"].get<double>();
    }
    EXPECT_DOUBLE_EQ(record["gpu_peak_gb"].get<double>(), largest_peak);
    // Rank 0's own rate is the record's rate per GPU (both: its tokens over its mean step time).
    EXPECT_NEAR(ranks[0]["tokens_per_sec"].get<double>(), record["throughput_tokens_per_sec_per_gpu"].get<double>(),
                1e-9 * record["throughput_tokens_per_sec_per_gpu"].get<double>());
    ASSERT_EQ(record["node_throughput"].size(), 1u) << "one host";
    EXPECT_EQ(record["nodes"], 1);
    EXPECT_EQ(record["node_throughput"][0]["ranks"], Json::array({0, 1}));
    EXPECT_NEAR(record["node_throughput"][0]["tokens_per_sec"].get<double>(), sum, 1e-9 * sum);
    EXPECT_GE(record["rank_step_spread_pct"].get<double>(), 0);
    EXPECT_GE(record["rank_busy_spread_pct"].get<double>(), 0);
  }
  ASSERT_GE(optimal, 0);
  // The engine's memory plan predicts what its allocator measured, pool by pool and the peak (the CPU backend keeps
  // no workspace of its own in the allocator).
  for (const Json& record : records) {
    SCOPED_TRACE(record["stage"].dump());
    for (const char* pool : {"parameters", "gradients", "optimizer_state", "activations", "workspace"}) {
      EXPECT_EQ(record[std::string(pool) + "_gb"], record["predicted_" + std::string(pool) + "_gb"]) << pool;
    }
    EXPECT_EQ(record["gpu_peak_gb"], record["predicted_gpu_peak_gb"]);
    EXPECT_EQ(record["backend_workspace_gb"], 0.0);
  }
  // Measured: stage 1 keeps about half of stage 0's optimizer state on each rank (its shard, padded).
  EXPECT_LT(records[1]["optimizer_state_gb"].get<double>(), 0.6 * records[0]["optimizer_state_gb"].get<double>());
  EXPECT_GT(records[1]["optimizer_state_gb"].get<double>(), 0.4 * records[0]["optimizer_state_gb"].get<double>());

  const auto rows = parse_csv(read_text(only_file(out.path(), "zero_comparison_", ".csv")));
  ASSERT_EQ(rows.size(), 5u);
  std::vector<std::string> keys;
  for (const auto& item : records[0].items())
    if (!item.value().is_structured()) keys.push_back(item.key());
  EXPECT_EQ(rows[0], keys) << "the CSV's columns are the JSON's flat keys, in order";
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), keys.size());
    EXPECT_EQ(rows[i][0], std::to_string(i - 1));  // stage
    EXPECT_DOUBLE_EQ(
        std::stod(rows[i][size_t(std::find(keys.begin(), keys.end(), "throughput_tokens_per_sec") - keys.begin())]),
        records[i - 1]["throughput_tokens_per_sec"].get<double>());
  }

  const std::string chart = read_text(only_file(out.path(), "zero_comparison_", ".svg"));
  EXPECT_EQ(chart.rfind("<svg", 0), 0u);
  EXPECT_NE(chart.find("device peak memory"), std::string::npos);
  EXPECT_EQ(chart.find("GPU"), std::string::npos) << "the CPU backend has no GPU";
  const Json ds = read_json(only_file(out.path(), "ds_config_zero_comparison_", ".json"));
  EXPECT_EQ(ds["zero_optimization"]["stage"], optimal);
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], 2);
  for (const auto& entry : fs::directory_iterator(out.path()))
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << "no temporary file left: " << entry.path();
}

// Activation checkpointing as one more axis: every mode with every stage, each recorded with its mode, its
// activation memory as planned (full least, none most), and training exactly as without it.
// --profile-dir under mpirun: each configuration writes a trace, summary and timeline per rank (no schedule: the
// last three steps), with its label in the names, and its record the exposed times. The ranks' traces share rank
// 0's clock: a step starts on both within a fraction of the step (every step ends in collectives that hold the
// ranks together; a trace on another clock would put every step off by the gap between the ranks' own readings).
TEST(ComparisonPrograms, ProfilesEachConfigurationOnEveryRankOnOneClock) {
  TempDir dir;
  const auto r = run_job("zero_bench", tiny_run(3) + " --stages 1 3 --output-dir " + dir.path().string() +
                                           " --profile-dir " + (dir.path() / "profile").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string config : {"stage_1", "stage_3"}) {
    SCOPED_TRACE(config);
    std::vector<std::map<std::string, double>> starts(2);  // by rank: each step's start, us
    std::vector<double> durations;
    for (int rank = 0; rank < 2; ++rank) {
      const fs::path profile = dir.path() / "profile";
      const std::string stem = config + "_steps2-4_rank" + std::to_string(rank);
      ASSERT_TRUE(fs::exists(profile / ("profile_" + stem + ".txt"))) << r.output;
      ASSERT_TRUE(fs::exists(profile / ("timeline_" + stem + ".svg")));
      const Json trace = Json::parse(read_gzip_file((profile / ("trace_" + stem + ".json.gz")).string()));
      bool collectives = false;
      for (const Json& e : trace["traceEvents"]) {
        if (e["ph"] != "X") continue;
        if (e["cat"] == "step") starts[size_t(rank)][e["name"]] = e["ts"], durations.push_back(e["dur"]);
        if (e["cat"] == "collective") collectives = true;
      }
      EXPECT_TRUE(collectives) << "the stage's collectives are traced";
      EXPECT_EQ(starts[size_t(rank)].size(), 3u);
    }
    // A clock offset would move every step alike; a rank preempted on a busy host delays one: the closest step.
    const double shortest = *std::min_element(durations.begin(), durations.end());
    double closest = std::numeric_limits<double>::infinity();
    for (const auto& [step, start] : starts[0]) {
      ASSERT_TRUE(starts[1].count(step)) << step;
      closest = std::min(closest, std::abs(starts[1][step] - start));
    }
    EXPECT_LT(closest, 0.5 * shortest) << "every step starts apart on the two ranks";
  }
  const Json records = read_json(only_file(dir.path(), "zero_comparison_", ".json"));
  for (const Json& record : records) {
    EXPECT_EQ(record["profile_steps"], "2-4");
    EXPECT_GT(record["exposed_compute_ms"].get<double>(), 0);
    EXPECT_TRUE(record["exposed_collectives_ms"].is_number());
  }
}

TEST(ComparisonPrograms, ZeroBenchComparesActivationCheckpointing) {
  TempDir out;
  const ProgramResult r =
      run_job("zero_bench", kTiny + " --stages 1 3 --activation-checkpointing none full selective --output-dir " +
                                out.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("stage 3, full ckpt"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stage 1, selective ckpt"), std::string::npos) << r.output;
  const Json records = read_json(only_file(out.path(), "zero_comparison_", ".json"));
  ASSERT_EQ(records.size(), 6u);
  const char* modes[] = {"none", "full", "selective"};
  for (size_t i = 0; i < records.size(); ++i) {
    const Json& record = records[i];
    SCOPED_TRACE(i);
    ASSERT_EQ(record["status"], "ok") << record["error"];
    EXPECT_EQ(record["activation_checkpointing"], modes[i / 2]);
    EXPECT_EQ(record["stage"], i % 2 == 0 ? 1 : 3);
    EXPECT_NEAR(record["activations_gb"].get<double>(), record["predicted_activations_gb"].get<double>(),
                0.05 * record["predicted_activations_gb"].get<double>());
    EXPECT_EQ(record["loss_first"], records[i % 2]["loss_first"]) << "the same training";
    EXPECT_EQ(record["loss_last"], records[i % 2]["loss_last"]) << "the same training";
  }
  const auto activations = [&](size_t i) { return records[i]["predicted_activations_gb"].get<double>(); };
  EXPECT_LT(activations(2), activations(4));
  EXPECT_LT(activations(4), activations(0));
}

TEST(ComparisonPrograms, OffloadBenchRunsEveryStrategyAndRemovesItsFiles) {
  TempDir out, nvme;
  const ProgramResult r =
      run_job("offload_bench", kTiny + " --output-dir " + out.path().string() + " --nvme-path " + nvme.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json records = read_json(only_file(out.path(), "offload_comparison_", ".json"));
  expect_every_field(records);
  ASSERT_EQ(records.size(), 4u) << "none, cpu_optimizer, cpu_full and nvme (--nvme-path given)";
  const std::vector<std::pair<std::string, int>> expected = {
      {"none", 2}, {"cpu_optimizer", 2}, {"cpu_full", 3}, {"nvme", 2}};  // stage 3 for parameter offload
  EXPECT_NE(r.output.find("none (stage 2)"), std::string::npos) << "offload_bench names every strategy";
  for (size_t i = 0; i < expected.size(); ++i) {
    const Json& record = records[i];
    SCOPED_TRACE(expected[i].first);
    EXPECT_EQ(record["strategy"], expected[i].first);
    EXPECT_EQ(record["stage"], expected[i].second);
    EXPECT_EQ(record["status"], "ok") << record["error"];
    if (i > 0) {
      EXPECT_GT(record["cpu_pinned_gb"].get<double>(), 0) << "the optimizer state is on the host";
      EXPECT_TRUE(record["offload_cpu_optimizer_ms"].is_number());
      EXPECT_GE(record["offload_speculation_kept_ms"].get<double>(), 0);
      EXPECT_GE(record["offload_speculation_discarded_ms"].get<double>(), 0);
      EXPECT_EQ(record["predicted_optimizer_state_gb"].get<double>(), 0);
    }
  }
  EXPECT_GT(records[3]["nvme_read_gb"].get<double>(), 0);
  EXPECT_GT(records[3]["nvme_write_gb"].get<double>(), 0);
  EXPECT_TRUE(records[0]["nvme_read_gb"].is_null());
  EXPECT_TRUE(fs::is_empty(nvme.path())) << "the nvme strategy's files are removed";
}

// cpu_optimizer:0.5 keeps the first units' optimizer state on the device: less on the host, some on the
// device, and the name and the ratio in the results (the training itself is tested against no offload in
// zero_equivalence_test).
TEST(ComparisonPrograms, OffloadBenchComparesOffloadRatios) {
  TempDir out;
  const ProgramResult r = run_job(
      "offload_bench", kTiny + " --strategies cpu_optimizer cpu_optimizer:0.5 --output-dir " + out.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cpu_optimizer:0.5 (stage 2)"), std::string::npos) << r.output;
  const Json records = read_json(only_file(out.path(), "offload_comparison_", ".json"));
  ASSERT_EQ(records.size(), 2u);
  const Json &whole = records[0], &partial = records[1];
  EXPECT_EQ(whole["strategy"], "cpu_optimizer");
  EXPECT_EQ(whole["offload_ratio"], 1.0);
  EXPECT_EQ(partial["strategy"], "cpu_optimizer:0.5");
  EXPECT_EQ(partial["offload_ratio"], 0.5);
  EXPECT_EQ(whole["offloaded_share"], 1.0);
  EXPECT_GE(partial["offloaded_share"].get<double>(), 0.5);
  EXPECT_LT(partial["offloaded_share"].get<double>(), 1.0);
  for (const Json& record : records) EXPECT_EQ(record["status"], "ok") << record["error"];
  EXPECT_EQ(whole["optimizer_state_gb"].get<double>(), 0);
  EXPECT_EQ(whole["predicted_optimizer_state_gb"].get<double>(), 0);
  const double on_device = partial["optimizer_state_gb"].get<double>();
  EXPECT_GT(on_device, 0);
  // At most half of the 12 bytes an element of the rank's shard (2 ranks, stage 2), padding aside; the
  // prediction counts the same units without the padding.
  EXPECT_LE(on_device, 0.5 * 12 * partial["parameters"].get<double>() / 2 / 1e9 * 1.05);
  EXPECT_NEAR(partial["predicted_optimizer_state_gb"].get<double>(), on_device, 0.05 * on_device);
  EXPECT_LT(partial["cpu_pinned_gb"].get<double>(), whole["cpu_pinned_gb"].get<double>());
}

// The multi-node launch as the README writes it (`mpirun --hostfile`, one rank per slot), here with the one
// host this machine has: the ranks find their host's GPUs (here the CPU) by their place on the host, and the
// records group them by host.
TEST(ComparisonPrograms, AHostfileLaunchGroupsTheRanksByHost) {
  TempDir out;
  const fs::path hosts = out.path() / "hosts";
  std::ofstream(hosts) << "localhost slots=3\n";
  const ProgramResult r =
      run_command(std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 ") +
                  ZB_MPIEXEC + " -np 3 --hostfile " + hosts.string() + " --mca mpi_yield_when_idle 1 " + ZB_BINARY_DIR +
                  "/zero_bench " + kTiny + " --stages 1 --output-dir " + (out.path() / "results").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json records = read_json(only_file(out.path() / "results", "zero_comparison_", ".json"));
  ASSERT_EQ(records.size(), 1u);
  const Json& record = records[0];
  EXPECT_EQ(record["world_size"], 3);
  ASSERT_EQ(record["node_throughput"].size(), 1u);
  EXPECT_EQ(record["node_throughput"][0]["ranks"], Json::array({0, 1, 2}));
  ASSERT_EQ(record["per_rank"].size(), 3u);
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(record["per_rank"][size_t(rank)]["rank"], rank);
}

TEST(ComparisonPrograms, AConfigurationOutOfMemoryIsRecordedAndTheOthersRun) {
  TempDir first, second;
  const ProgramResult free_run = run_job("zero_bench", kTiny + " --stages 0 3 --output-dir " + first.path().string());
  ASSERT_EQ(free_run.exit_code, 0) << free_run.output;
  const Json measured = read_json(only_file(first.path(), "zero_comparison_", ".json"));
  const double stage0 = measured[0]["gpu_peak_gb"], stage3 = measured[1]["gpu_peak_gb"];
  ASSERT_GT(stage0, stage3 * 1.05) << "stage 3 must need less memory than stage 0 for this test to mean anything";
  const double limit = (stage0 + stage3) / 2;
  const ProgramResult r = run_job("zero_bench", kTiny + " --stages 0 3 --device-memory-limit-gb " +
                                                    std::to_string(limit) + " --output-dir " + second.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json records = read_json(only_file(second.path(), "zero_comparison_", ".json"));
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["status"], "oom");
  EXPECT_NE(records[0]["error"].get<std::string>().find("out of host memory"), std::string::npos)
      << records[0]["error"];
  EXPECT_TRUE(records[0]["throughput_tokens_per_sec"].is_null());
  // The pool that asked and its bytes, the failing rank's: more than the cap had left.
  const std::set<std::string> pools = {"parameters", "gradients", "optimizer_state", "activations", "workspace"};
  EXPECT_TRUE(pools.count(records[0]["oom_pool"].get<std::string>())) << records[0]["oom_pool"];
  EXPECT_GT(records[0]["oom_bytes"].get<double>(), 0);
  EXPECT_NEAR(records[0]["device_memory_limit_gb"].get<double>(), limit, 1e-6);  // (as std::to_string wrote it)
  EXPECT_TRUE(records[1]["oom_bytes"].is_null());
  EXPECT_GT(records[0]["gpu_peak_gb"].get<double>(), 0) << "how far it got before running out";
  EXPECT_LE(records[0]["gpu_peak_gb"].get<double>(), limit);
  // The table and the record say why: the status and the first line of the reason.
  EXPECT_EQ(records[0]["recommendation"], "does not fit: " + records[0]["error"].get<std::string>());
  EXPECT_NE(r.output.find("does not fit: rank "), std::string::npos) << r.output;
  EXPECT_EQ(records[1]["status"], "ok") << records[1]["error"];
  // (A loaded machine may add a note on the ranks' spread after it.)
  EXPECT_EQ(records[1]["recommendation"].get<std::string>().rfind("OPTIMAL", 0), 0u) << records[1]["recommendation"];
  EXPECT_NE(r.output.find("oom"), std::string::npos) << r.output;
}

TEST(ComparisonPrograms, RegressionModeFailsOnADoctoredBaselineAndPassesOnTheTrueOne) {
  const std::string kTimed = tiny_run(8);
  TempDir out, again, doctored_dir;
  ASSERT_EQ(run_job("zero_bench", kTimed + " --stages 1 --output-dir " + out.path().string()).exit_code, 0);
  const fs::path baseline = only_file(out.path(), "zero_comparison_", ".json");
  // CPU timings of one run to the next vary: ctest runs this case alone (RUN_ALONE in tests/CMakeLists.txt), it
  // times more steps than the others, the true baseline is checked with room for what is left of that, and the
  // doctored one lies far beyond it (throughput 100x, a 99% drop; peak memory halved, a 100% rise; memory is
  // counted, not timed, and does not vary).
  const ProgramResult pass = run_job("zero_bench", kTimed + " --stages 1 --output-dir " + again.path().string() +
                                                       " --baseline " + baseline.string() + " --max-regression 95");
  EXPECT_EQ(pass.exit_code, 0) << pass.output;
  EXPECT_NE(pass.output.find("no regression"), std::string::npos) << pass.output;

  Json doctored = read_json(baseline);
  doctored[0]["throughput_tokens_per_sec"] = doctored[0]["throughput_tokens_per_sec"].get<double>() * 100;
  doctored[0]["gpu_peak_gb"] = doctored[0]["gpu_peak_gb"].get<double>() / 2;
  const fs::path doctored_path = doctored_dir.path() / "baseline.json";
  std::ofstream(doctored_path) << doctored.dump();
  const ProgramResult fail =
      run_job("zero_bench", kTimed + " --stages 1 --output-dir " + again.path().string() + " --baseline " +
                                doctored_path.string() + " --max-regression 95");
  EXPECT_EQ(fail.exit_code, 1) << fail.output;
  EXPECT_NE(fail.output.find("REGRESSION: gpt2-tiny stage 1 none world 2"), std::string::npos) << fail.output;
  EXPECT_NE(fail.output.find("throughput"), std::string::npos) << fail.output;
  EXPECT_NE(fail.output.find("GPU peak memory"), std::string::npos) << fail.output;

  // A configuration on one side only is listed, not silently skipped.
  const ProgramResult partly = run_job("zero_bench", kTimed + " --stages 0 1 --output-dir " + again.path().string() +
                                                         " --baseline " + baseline.string() + " --max-regression 95");
  EXPECT_EQ(partly.exit_code, 0) << partly.output;
  EXPECT_NE(partly.output.find("not in the baseline (not compared): gpt2-tiny stage 0 none world 2"), std::string::npos)
      << partly.output;
}

// The CI script: against a baseline it made on the CPU backend it passes (exit 0) and writes a Markdown
// summary; against a doctored baseline (throughput 100x, memory halved) it fails (exit 1) and the summary
// names the regression. Run alone (RUN_ALONE): it times steps.
TEST(ComparisonPrograms, RegressionScriptOnABaselineItMadeAndADoctoredOne) {
  TempDir dir;
  const std::string env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 RANKS=2 BIN=" +
                          std::string(ZB_BINARY_DIR) + " MPIEXEC=" + ZB_MPIEXEC +
                          " MPIRUN_ARGS='--oversubscribe --mca mpi_yield_when_idle 1' ";
  // (appended, not " " + tiny_run(8): GCC 12 warns falsely of an overlapping copy in that inlined insert)
  const std::string flags = std::string(" ").append(tiny_run(8)).append(" --stages 1 --max-regression 95");
  const fs::path made = dir.path() / "made";
  ASSERT_EQ(run_job("zero_bench", tiny_run(8) + " --stages 1 --output-dir " + made.string()).exit_code, 0);
  const fs::path baseline = only_file(made, "zero_comparison_", ".json");
  const std::string script = std::string(ZB_SOURCE_DIR) + "/scripts/regression_check.sh ";

  const ProgramResult pass =
      run_command(env + "OUT=" + (dir.path() / "pass").string() + " " + script + baseline.string() + flags);
  EXPECT_EQ(pass.exit_code, 0) << pass.output;
  const std::string good = read_text(dir.path() / "pass" / "summary.md");
  EXPECT_NE(good.find("No regression"), std::string::npos) << good;
  EXPECT_NE(good.find("| gpt2-tiny stage 1 none world 2 batch 2 seq 32 accum 1 fp32 |"), std::string::npos) << good;

  Json doctored = read_json(baseline);
  doctored[0]["throughput_tokens_per_sec"] = doctored[0]["throughput_tokens_per_sec"].get<double>() * 100;
  doctored[0]["gpu_peak_gb"] = doctored[0]["gpu_peak_gb"].get<double>() / 2;
  const fs::path doctored_path = dir.path() / "doctored.json";
  std::ofstream(doctored_path) << doctored.dump();
  const ProgramResult fail =
      run_command(env + "OUT=" + (dir.path() / "fail").string() + " " + script + doctored_path.string() + flags);
  EXPECT_EQ(fail.exit_code, 1) << fail.output;
  const std::string bad = read_text(dir.path() / "fail" / "summary.md");
  EXPECT_NE(bad.find("2 regression(s)"), std::string::npos) << bad;
  EXPECT_NE(bad.find("| REGRESSION: throughput"), std::string::npos) << bad;
  // The change column: about -99% (the doctored baseline claims 100 times this machine's throughput).
  EXPECT_TRUE(std::regex_search(bad, std::regex("\\| -9[0-9]\\.[0-9]% \\|"))) << bad;
}

// A baseline that cannot be compared with the run is refused before any work (exit 2), not taken as "no
// regression": an empty array, records that are not results, or results of other configurations only.
TEST(ComparisonPrograms, ABaselineThatCannotBeComparedIsRefused) {
  TempDir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    const fs::path path = dir.path() / name;
    std::ofstream(path) << text;
    return path.string();
  };
  Json other = Json::array();
  other.push_back({{"model", "gpt2-xl"},
                   {"stage", 1},
                   {"strategy", "none"},
                   {"world_size", 2},
                   {"batch_size", 2},
                   {"seq_length", 32},
                   {"grad_accum", 1},
                   {"dtype", "fp32"},
                   {"status", "ok"},
                   {"throughput_tokens_per_sec", 1000.0},
                   {"gpu_peak_gb", 1.0}});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {write("empty.json", "[]"), "holds no results"},
      {write("fields.json", R"([{"model": "gpt2-tiny", "stage": 1}])"), "result 1 lacks strategy, world_size"},
      {write("other.json", other.dump()), "shares no configuration with this run"},
  };
  for (const auto& [baseline, expected] : cases) {
    const fs::path results = dir.path() / "results";
    const ProgramResult r =
        run_job("zero_bench", kTiny + " --stages 1 --baseline " + baseline + " --output-dir " + results.string());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--baseline " + baseline + ": "), std::string::npos) << "names the flag: " << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
    EXPECT_TRUE(!fs::exists(results) || fs::is_empty(results)) << "nothing written before the input is refused";
  }
}

// Ctrl-C: the configuration in progress stops at its next step, what had finished is written (a valid results
// file, no temporary left), and the exit code says it was interrupted. (How many configurations finish before
// the signal depends on the machine's speed; none of them may be the interrupted one.) --foreground: without it
// timeout sends the signal twice, to the program and to its process group, and where the program's handler
// runs between the two (a loaded machine), the second is the "press Ctrl-C again to end now" that exits at once.
// (SIGTERM to a single process is taken as Ctrl-C is.)
class ComparisonInterrupted : public ::testing::TestWithParam<std::string> {};

TEST_P(ComparisonInterrupted, WritesWhatHasFinished) {
  TempDir out;
  const ProgramResult r =
      run_command("timeout --foreground --preserve-status -s " + GetParam() + " 4 " + std::string(ZB_BINARY_DIR) +
                  "/zero_bench " + tiny_run(600) + " --output-dir " + out.path().string());
  EXPECT_EQ(r.exit_code, 130) << r.output;
  EXPECT_NE(r.output.find("interrupted: "), std::string::npos) << r.output;
  const Json records = read_json(only_file(out.path(), "zero_comparison_", ".json"));
  ASSERT_TRUE(records.is_array());
  EXPECT_LT(records.size(), 4u) << "the run was meant to be cut short: raise --num-steps";
  for (const Json& record : records) EXPECT_EQ(record["status"], "ok");
  for (const auto& entry : fs::directory_iterator(out.path()))
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
}

INSTANTIATE_TEST_SUITE_P(Signals, ComparisonInterrupted, ::testing::Values("INT", "TERM"));

// Ctrl-C under mpirun: Open MPI passes it on to the ranks as SIGTERM once odls_base_sigkill_timeout seconds
// have passed, and SIGKILLs them as many seconds later; with room to finish the step in progress, the ranks
// stop together, rank 0 writes what finished and prints the table, and no NVMe file is left behind. (mpirun
// itself exits 1: Open MPI does not pass on the ranks' 130.)
TEST(ComparisonPrograms, CtrlCUnderMpirunWritesWhatHasFinished) {
  TempDir out, nvme;
  const ProgramResult r = run_command(
      "timeout --foreground -s INT 5 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 " +
      std::string(ZB_MPIEXEC) +
      " -np 2 --oversubscribe --mca mpi_yield_when_idle 1 --mca odls_base_sigkill_timeout 5 " + ZB_BINARY_DIR +
      "/offload_bench " + tiny_run(600) + " --strategies none nvme --nvme-path " + nvme.path().string() +
      " --output-dir " + out.path().string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  const Json records = read_json(only_file(out.path(), "offload_comparison_", ".json"));
  ASSERT_TRUE(records.is_array()) << "a valid results file";
  for (const Json& record : records) EXPECT_EQ(record["status"], "ok");
  EXPECT_TRUE(fs::is_empty(nvme.path())) << "no NVMe file left behind";
  EXPECT_NE(r.output.find("interrupted: "), std::string::npos) << r.output;
}

// A recommendation DeepSpeed cannot express (offload in stage 0) is written without it, and said so.
TEST(ComparisonPrograms, ARecommendationDeepSpeedCannotExpressIsNoted) {
  TempDir out;
  const ProgramResult r =
      run_job("zero_bench", kTiny + " --stages 0 --offload cpu_optimizer --output-dir " + out.path().string(), 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("note: DeepSpeed offloads nothing in stage 0"), std::string::npos) << r.output;
  const Json ds = read_json(only_file(out.path(), "ds_config_zero_comparison_", ".json"));
  EXPECT_EQ(ds["zero_optimization"]["stage"], 0);
  EXPECT_FALSE(ds["zero_optimization"].contains("offload_optimizer")) << ds.dump();
}

// A configuration that fails is shown in the table with its status and the first line of its reason, and the
// next configuration runs.
TEST(ComparisonPrograms, AFailedConfigurationSaysWhyInTheTable) {
  TempDir out;
  const ProgramResult r =
      run_job("zero_bench", kTiny + " --stages 0 1 --inject-failure 0:1:2 --output-dir " + out.path().string(), 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json records = read_json(only_file(out.path(), "zero_comparison_", ".json"));
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["status"], "error");
  const std::string why = "error: a failure injected for tests on rank 0 at step 2";
  EXPECT_EQ(records[0]["recommendation"], why);
  EXPECT_TRUE(std::regex_search(r.output, std::regex("stage 0 +\\|.*\\| error +\\| " + why))) << r.output;
  EXPECT_EQ(records[1]["status"], "ok") << records[1]["error"];
}

// One rank fails alone in the middle of a step (--inject-failure) while the other waits in the step's
// collective: the failed rank gives up on the agreement after --agreement-timeout-s and ends the job, so no
// rank hangs; the configuration that finished before is in the results, and no NVMe file is left behind.
TEST(ComparisonPrograms, ARankFailingAloneEndsTheJobAndKeepsWhatFinished) {
  TempDir out, nvme;
  const auto start = std::chrono::steady_clock::now();
  const ProgramResult r =
      run_command("timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 " +
                  std::string(ZB_MPIEXEC) + " -np 2 --oversubscribe " + ZB_BINARY_DIR + "/offload_bench " + kTiny +
                  " --strategies none nvme --nvme-path " + nvme.path().string() +
                  " --inject-failure 1:2:2 --agreement-timeout-s 3 --output-dir " + out.path().string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "the job hung until the test's timeout";
  EXPECT_LT(seconds, 100);
  EXPECT_NE(r.output.find("error on rank 1: a failure injected"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not reach the agreement within 3 s"), std::string::npos) << r.output;
  const Json records = read_json(only_file(out.path(), "offload_comparison_", ".json"));
  ASSERT_EQ(records.size(), 1u) << "the finished configuration, written before the failure";
  EXPECT_EQ(records[0]["strategy"], "none");
  EXPECT_EQ(records[0]["status"], "ok");
  EXPECT_TRUE(fs::is_empty(nvme.path())) << "every rank's NVMe file is removed";
}

// GPUs visible to this process (0 where there is no driver).
int visible_gpus() {
  FILE* pipe = ::popen("nvidia-smi -L 2>/dev/null | grep -c '^GPU'", "r");
  if (!pipe) return 0;
  int count = 0;
  if (std::fscanf(pipe, "%d", &count) != 1) count = 0;
  ::pclose(pipe);
  return count;
}

// On a host with two GPUs: the default device (one GPU per rank, NCCL, bf16), and a configuration forced out of
// GPU memory beside one that fits. Skipped elsewhere.
TEST(ComparisonPrograms, ZeroBenchOnTwoGpus) {
  if (visible_gpus() < 2) GTEST_SKIP() << "needs two GPUs";
  TempDir out, limited;
  // gpt2 (124M): stage 0's 16 bytes per parameter against stage 3's 8 differ by ~1 GB, far above the fixed
  // workspace both share.
  const std::string small = "--model gpt2 --batch-size 2 --seq-length 128 --num-steps 2 --warmup-steps 1";
  const ProgramResult r = run_job("zero_bench", small + " --output-dir " + out.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json records = read_json(only_file(out.path(), "zero_comparison_", ".json"));
  ASSERT_EQ(records.size(), 4u);
  for (const Json& record : records) {
    EXPECT_EQ(record["status"], "ok") << record["error"];
    EXPECT_EQ(record["dtype"], "bf16");
    EXPECT_EQ(record["gpu_count"], 2);
    // Each rank on its own GPU, whose clock and power NVML sampled during the timed steps.
    ASSERT_EQ(record["per_rank"].size(), 2u);
    for (int rank = 0; rank < 2; ++rank) {
      const Json& own = record["per_rank"][size_t(rank)];
      EXPECT_EQ(own["gpu_index"], rank);
      EXPECT_GT(own["telemetry_samples"].get<int>(), 0) << own["telemetry_unavailable"];
      EXPECT_GT(own["sm_clock_mhz_median"].get<double>(), 100);
      EXPECT_GT(own["power_w_median"].get<double>(), 10);
    }
    EXPECT_NE(record["nccl_version"].get<std::string>(), "");
    EXPECT_GT(record["gpu_capacity_gb"].get<double>(), 1);
  }
  const double stage0 = records[0]["gpu_peak_gb"], stage3 = records[3]["gpu_peak_gb"];
  ASSERT_GT(stage0, stage3 + 0.5);
  const ProgramResult oom =
      run_job("zero_bench", small + " --stages 0 3 --device-memory-limit-gb " + std::to_string((stage0 + stage3) / 2) +
                                " --output-dir " + limited.path().string());
  ASSERT_EQ(oom.exit_code, 0) << oom.output;
  const Json outcome = read_json(only_file(limited.path(), "zero_comparison_", ".json"));
  ASSERT_EQ(outcome.size(), 2u);
  EXPECT_EQ(outcome[0]["status"], "oom");
  EXPECT_EQ(outcome[1]["status"], "ok") << outcome[1]["error"];
}

struct BadInput {
  std::string program, arguments, expected;  // expected: a part of the message (the flag it names)
};

class ComparisonBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(ComparisonBadInput, ExitsWithCode2NamingTheFlagAndWritesNothing) {
  TempDir out;
  const fs::path results = out.path() / "results";
  const BadInput c = GetParam();
  const ProgramResult r = run_program(c.program, c.arguments + " --output-dir " + results.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
  EXPECT_TRUE(!fs::exists(results) || fs::is_empty(results)) << "nothing written before the input is refused";
}

INSTANTIATE_TEST_SUITE_P(
    Flags, ComparisonBadInput,
    ::testing::Values(
        BadInput{"zero_bench", kTiny + " --stages 4", "--stages"},
        BadInput{"zero_bench", kTiny + " --stages 1 1", "--stages"},
        BadInput{"zero_bench", kTiny + " --offload gpu", "--offload"},
        BadInput{"zero_bench", kTiny + " --offload nvme", "--nvme-path"},
        BadInput{"zero_bench", kTiny + " --repeat 0", "--repeat"},
        BadInput{"zero_bench", kTiny + " --batch-size 0", "--batch-size"},
        BadInput{"zero_bench", kTiny + " --warmup-steps -1", "--warmup-steps"},
        BadInput{"zero_bench", kTiny + " --gpu-hour-usd -1", "--gpu-hour-usd"},
        BadInput{"zero_bench", kTiny + " --max-regression -5", "--max-regression"},
        BadInput{"zero_bench", kTiny + " --baseline /nonexistent/results.json", "--baseline"},
        BadInput{"zero_bench", kTiny + " --config /nonexistent/ds.json", "/nonexistent/ds.json"},
        BadInput{"zero_bench", kTiny + " --dtype fp16", "--dtype"},
        BadInput{"zero_bench", "--device cpu --model no-such-model", "no-such-model"},
        BadInput{"zero_bench", "--device cpu --model gpt2-tiny --seq-length 0", "--seq-length: must be a positive"},
        BadInput{"offload_bench", "--device cpu --model gpt2-tiny --seq-length -3", "--seq-length: must be a positive"},
        BadInput{"offload_bench", kTiny + " --strategies none gpu", "--strategies"},
        BadInput{"offload_bench", kTiny + " --strategies nvme", "--nvme-path"},
        BadInput{"offload_bench", kTiny + " --strategies cpu_optimizer:1.5", "--strategies: cpu_optimizer:1.5"},
        BadInput{"offload_bench", kTiny + " --strategies cpu_optimizer:x", "--strategies: cpu_optimizer:x"},
        BadInput{"offload_bench", kTiny + " --strategies cpu_full:0.5", "--strategies: cpu_full:0.5"},
        BadInput{"offload_bench", kTiny + " --strategies cpu_optimizer:0.5 cpu_optimizer:.5", "twice"},
        BadInput{"zero_bench", kTiny + " --offload cpu_full --offload-ratio 0.5", "--offload-ratio"},
        BadInput{"zero_bench", kTiny + " --offload cpu_optimizer --offload-ratio -1", "--offload-ratio"},
        BadInput{"offload_bench", kTiny + " --nvme-path /nonexistent/folder", "--nvme-path"},
        BadInput{"offload_bench", kTiny + " --stage 7", "--stage"},
        BadInput{"offload_bench", kTiny + " --no-such-flag", "no-such-flag"},
        BadInput{"zero_bench", kTiny + " --agreement-timeout-s 0", "--agreement-timeout-s"},
        BadInput{"zero_bench", kTiny + " --inject-failure 1:x", "--inject-failure"},
        BadInput{"zero_bench", kTiny + " --activation-checkpointing partial", "--activation-checkpointing: unknown"},
        BadInput{"offload_bench", kTiny + " --activation-checkpointing full full", "--activation-checkpointing: full is "
                                                                                   "named twice"}));

// Without --seq-length the sequence is min(512, the model's maximum), as in train: a model whose maximum is
// below 512 runs at its maximum instead of being refused.
TEST(ComparisonPrograms, TheDefaultSequenceFitsTheModel) {
  TempDir out;
  const ProgramResult r = run_job("zero_bench",
                                  "--device cpu --model gpt2-tiny --batch-size 1 --stages 0 "
                                  "--num-steps 1 --warmup-steps 0 --output-dir " +
                                      out.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json records = read_json(only_file(out.path(), "zero_comparison_", ".json"));
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["seq_length"], 64) << "gpt2-tiny's maximum";
}

// --data is checked as train checks it, before any configuration runs: each bad file exits 2 with the reason
// and writes nothing, where it was once recorded as an `error` in every configuration.
TEST(ComparisonPrograms, BadTokenFilesAreRefusedBeforeAnyConfiguration) {
  TempDir dir;
  std::vector<uint16_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = uint16_t(i * 7 % 256);  // below gpt2-tiny's 256
  std::vector<uint16_t> outside = ids;
  outside[500] = 300;
  struct Case {
    std::string name;
    std::function<void(const std::string&)> write;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"missing", [](const std::string&) {}, "--data: no file matches"},
      {"magic", [&](const std::string& p) { test::write_shard(p, ids, 12345); }, "magic"},
      {"truncated", [&](const std::string& p) { test::write_shard(p, ids, 20240520, 1, 5000); }, "truncated"},
      {"vocabulary", [&](const std::string& p) { test::write_shard(p, outside, 20240520, 1); }, "300"},
      {"short", [&](const std::string& p) { test::write_shard(p, std::vector<uint16_t>(40, 1)); }, "fewer than"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path folder = dir.path() / c.name, results = folder / "results";
    fs::create_directories(folder);
    c.write((folder / "shard_000.bin").string());
    for (const char* program : {"zero_bench", "offload_bench"}) {
      const ProgramResult r = run_job(
          program, kTiny + " --data '" + (folder / "shard_*.bin").string() + "' --output-dir " + results.string());
      EXPECT_EQ(r.exit_code, 2) << program << ": " << r.output;
      EXPECT_NE(r.output.find("--data"), std::string::npos) << program << ": " << r.output;
      EXPECT_NE(r.output.find(c.expected), std::string::npos) << program << ": " << r.output;
      EXPECT_TRUE(!fs::exists(results) || fs::is_empty(results)) << program << ": nothing written";
    }
  }
}

// Two runs into one --output-dir, started together (so, most often, in the same second), keep their own files:
// each name is claimed before it is written, and the recommended DeepSpeed config carries its run's name.
TEST(ComparisonPrograms, TwoRunsIntoOneFolderKeepTheirOwnFiles) {
  TempDir out;
  const std::string one = std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 ") +
                          ZB_MPIEXEC + " -np 1 " + ZB_BINARY_DIR + "/zero_bench " + kTiny + " --output-dir " +
                          out.path().string();
  const ProgramResult r = run_command("(" + one + " --stages 0 > /dev/null 2>&1 &); " + one + " --stages 1; wait");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int waited = 0; waited < 600; ++waited) {  // the first run's files, written by a process not waited for
    size_t configs = 0;
    for (const auto& entry : fs::directory_iterator(out.path()))
      configs += entry.path().filename().string().rfind("ds_config_", 0) == 0;
    if (configs == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::set<int> stages;
  size_t results = 0, configs = 0;
  for (const auto& entry : fs::directory_iterator(out.path())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("zero_comparison_", 0) == 0 && entry.path().extension() == ".json") {
      const Json records = read_json(entry.path());
      ASSERT_EQ(records.size(), 1u) << name;
      stages.insert(records[0]["stage"].get<int>());
      ++results;
      EXPECT_TRUE(fs::exists(out.path() / ("ds_config_" + entry.path().stem().string() + ".json"))) << name;
    }
    configs += name.rfind("ds_config_", 0) == 0;
  }
  EXPECT_EQ(results, 2u);
  EXPECT_EQ(configs, 2u);
  EXPECT_EQ(stages, (std::set<int>{0, 1})) << "each file holds its own run";
}

TEST(ComparisonPrograms, AnOutputFolderThatCannotBeWrittenIsRefused) {
  TempDir out;
  const fs::path file = out.path() / "a-file";
  std::ofstream(file) << "not a folder";
  const ProgramResult r = run_program("zero_bench", kTiny + " --output-dir " + (file / "results").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--output-dir"), std::string::npos) << r.output;
}

TEST(ComparisonPrograms, WithoutAGpuTheDefaultDeviceIsRefusedWithTheCpuForm) {
  if (std::system("nvidia-smi -L > /dev/null 2>&1") == 0) GTEST_SKIP() << "a GPU is present: cuda is the default";
  const ProgramResult r = run_program("zero_bench", "--model gpt2-tiny");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device cpu"), std::string::npos) << r.output;
}

TEST(ComparisonPrograms, ADeepSpeedConfigSetsTheRun) {
  TempDir out;
  const fs::path config = out.path() / "ds.json";
  std::ofstream(config) << R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2,
    "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e4}, "gradient_clipping": 0.5})";
  const ProgramResult r = run_job("zero_bench",
                                  "--device cpu --model gpt2-tiny --seq-length 32 --num-steps 1 "
                                  "--warmup-steps 0 --config " +
                                      config.string() + " --output-dir " + (out.path() / "results").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json records = read_json(only_file(out.path() / "results", "zero_comparison_", ".json"));
  ASSERT_EQ(records.size(), 1u) << "the config's stage replaces the default list";
  EXPECT_EQ(records[0]["stage"], 2);
  EXPECT_EQ(records[0]["batch_size"], 3);
  EXPECT_EQ(records[0]["grad_accum"], 2);
  const Json ds = read_json(only_file(out.path() / "results", "ds_config_", ".json"));
  EXPECT_EQ(ds["zero_optimization"]["reduce_bucket_size"], 50000);
  EXPECT_EQ(ds["gradient_clipping"], 0.5);
}

// train_batch_size alone is the global batch: on 2 ranks, 8 samples are 4 a GPU; and a config whose batch
// sizes disagree with the job's GPU count is refused before any work, as DeepSpeed refuses it.
TEST(ComparisonPrograms, ADeepSpeedConfigsGlobalBatchIsSplitOverTheGpus) {
  TempDir out;
  const auto run_with = [&](const std::string& name, const std::string& config) {
    std::ofstream(out.path() / name) << config;
    return run_job("zero_bench",
                   "--device cpu --model gpt2-tiny --seq-length 32 --num-steps 1 --warmup-steps 0 "
                   "--stages 1 --config " +
                       (out.path() / name).string() + " --output-dir " + (out.path() / (name + ".results")).string());
  };
  const ProgramResult r = run_with("global.json", R"({"train_batch_size": 8})");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json records = read_json(only_file(out.path() / "global.json.results", "zero_comparison_", ".json"));
  EXPECT_EQ(records[0]["batch_size"], 4);
  EXPECT_EQ(records[0]["grad_accum"], 1);
  const ProgramResult bad =
      run_with("three.json",
               R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4})");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("8 != 2 x 4 x 2"), std::string::npos) << bad.output;
}

// A DeepSpeed config in `folder` that offloads half of the optimizer state to the CPU, and the flags of a
// one-step tiny run with it, up to an --output-dir still to be named.
std::string partial_offload_config_flags(const fs::path& folder) {
  const fs::path config = folder / "ds.json";
  std::ofstream(config) << R"({"train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})";
  return "--device cpu --model gpt2-tiny --seq-length 32 --num-steps 1 --warmup-steps 0 --config " + config.string() +
         " --output-dir ";
}

// The config's offload_optimizer.ratio comes with its optimizer offload; a strategy given on the command line
// that offloads no optimizer state leaves it aside (as DeepSpeed reads it only there).
TEST(ComparisonPrograms, ADeepSpeedConfigsOffloadRatioGoesWithItsOptimizerOffload) {
  TempDir out;
  const std::string common = partial_offload_config_flags(out.path());
  const ProgramResult r = run_job("zero_bench", common + (out.path() / "a").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json records = read_json(only_file(out.path() / "a", "zero_comparison_", ".json"));
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["strategy"], "cpu_optimizer:0.5");
  // DeepSpeed takes a ratio in stage 3 only: the written config offloads all of it, and says so.
  const Json written = read_json(only_file(out.path() / "a", "ds_config_", ".json"));
  EXPECT_EQ(written["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_FALSE(written["zero_optimization"]["offload_optimizer"].contains("ratio")) << written.dump();
  EXPECT_NE(r.output.find("note: DeepSpeed offloads a part of the optimizer state in stage 3 only"), std::string::npos)
      << r.output;
  const ProgramResult none = run_job("zero_bench", common + (out.path() / "b").string() + " --offload none");
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_EQ(read_json(only_file(out.path() / "b", "zero_comparison_", ".json"))[0]["strategy"], "none");
}

// offload_bench compares strategies: the config's partial offload joins the ones it compares by default, and
// --strategies, when given, is what runs.
TEST(ComparisonPrograms, OffloadBenchAddsADeepSpeedConfigsPartialOffload) {
  TempDir out;
  const std::string common = partial_offload_config_flags(out.path());
  const ProgramResult r = run_job("offload_bench", common + (out.path() / "a").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json records = read_json(only_file(out.path() / "a", "offload_comparison_", ".json"));
  std::vector<std::string> names;
  for (const Json& record : records) names.push_back(record["strategy"]);
  EXPECT_EQ(names, (std::vector<std::string>{"none", "cpu_optimizer", "cpu_full", "cpu_optimizer:0.5"}));
  EXPECT_EQ(records.back()["offload_ratio"], 0.5);
  const ProgramResult named = run_job("offload_bench", common + (out.path() / "b").string() + " --strategies none");
  ASSERT_EQ(named.exit_code, 0) << named.output;
  EXPECT_EQ(read_json(only_file(out.path() / "b", "offload_comparison_", ".json")).size(), 1u);
}

// A config's activation_checkpointing section asks for full checkpointing unless the command line says
// otherwise.
TEST(ComparisonPrograms, ADeepSpeedConfigsCheckpointingGivesWayToTheFlag) {
  TempDir out;
  const fs::path config = out.path() / "ds.json";
  std::ofstream(config) << R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1},
    "activation_checkpointing": {"partition_activations": false}})";
  const std::string common = "--device cpu --model gpt2-tiny --seq-length 32 --num-steps 1 --warmup-steps 0 --config " +
                             config.string() + " --output-dir ";
  ASSERT_EQ(run_job("zero_bench", common + (out.path() / "a").string()).exit_code, 0);
  EXPECT_EQ(read_json(only_file(out.path() / "a", "zero_comparison_", ".json"))[0]["activation_checkpointing"], "full");
  ASSERT_EQ(run_job("zero_bench", common + (out.path() / "b").string() + " --activation-checkpointing none").exit_code,
            0);
  EXPECT_EQ(read_json(only_file(out.path() / "b", "zero_comparison_", ".json"))[0]["activation_checkpointing"], "none");
}

}  // namespace
}  // namespace zb::test
