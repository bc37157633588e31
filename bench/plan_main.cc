// plan: predicts, for a cluster we may not have, every configuration that gives the global batch (ZeRO stage,
// offload strategy, micro-batch and accumulation, checkpointing mode): its GPU memory by pool (the engine's own
// memory plan), whether it fits, its step time by phase and tokens/s, and its cost; prints the best in a table,
// explains the best one's time, and writes every configuration as JSON and CSV and the best as a DeepSpeed config.
// `plan --validate RESULTS.json...` predicts measured results instead and prints predicted against measured.
// Bad input (a flag out of range, a profile, cluster file or result file that cannot be read or holds values out of
// range, several nodes without the network between them) exits 2 before any output is written.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "bench/atomic_file.h"
#include "bench/cli.h"
#include "bench/cluster_spec.h"
#include "bench/comparison_output.h"
#include "bench/deepspeed_config.h"
#include "bench/plan_profile.h"
#include "bench/plan_search.h"
#include "bench/plan_validation.h"
#include "bench/text_table.h"
#include "core/errors.h"
#include "core/strings.h"
#include "models/model_registry.h"

namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct PlanFlags {
  std::string profile, model, cluster_file, output_dir = "plans";
  zb::ClusterSpec cluster;             // the flags' figures (unset where not given)
  int gpus_per_node = -1, nodes = -1;  // -1: not given
  int64_t global_batch = 0, seq = -1;  // seq -1: not given
  double gpu_hour_usd = 0, min_headroom_gb = 1.0;
  int top = 10;
  std::vector<std::string> validate;
};

// An optional figure flag: unset unless given.
void add_figure(po::options_description_easy_init& add, const char* name, std::optional<double>& into,
                const char* help) {
  add(name, po::value<double>()->notifier([&into](double v) { into = v; }), help);
}

void add_plan_flags(po::options_description& options, PlanFlags& f) {
  auto add = options.add_options();
  add("profile", po::value(&f.profile), "a model's profile.json, as sweep writes it (required)");
  add("model", po::value(&f.model),
      "the model to plan (default: the profile's); another of its family (Llama-2-70b from Llama-2-7b's profile) has "
      "its compute scaled by the work a token");
  add("gpus-per-node", po::value(&f.gpus_per_node)->default_value(-1, ""),
      zb::cat("GPUs in each node (1 to ", zb::kMaxGpusPerNode, ")").c_str());
  add("nodes", po::value(&f.nodes)->default_value(-1, ""),
      zb::cat("nodes (default 1; at most ", zb::kMaxNodes, ")").c_str());
  add("global-batch-size", po::value(&f.global_batch), "samples an optimizer step, over every GPU");
  add("seq-length", po::value(&f.seq)->default_value(-1, ""),
      "tokens per sample (default: the one the profile measured most)");
  add("cluster", po::value(&f.cluster_file),
      "a cluster's JSON: gpu, gpus_per_node, nodes, gpu_memory_gb, intra_node_gbps, intra_node_latency_us, "
      "inter_node_gbps, inter_node_latency_us, host_memory_gb, host_cores, nvme_read_gbps, nvme_write_gbps (the "
      "flags win)");
  add_figure(add, "gpu-memory-gb", f.cluster.gpu_memory_gb, "each GPU's memory (default: the profile's GPU's)");
  add_figure(add, "intra-node-gbps", f.cluster.intra_node_gbps,
             "all-reduce bus bandwidth among a node's GPUs, GB/s (default: as the profile measured it)");
  add_figure(add, "intra-node-latency-us", f.cluster.intra_node_latency_us, "a step's latency within a node (5)");
  add_figure(add, "inter-node-gbps", f.cluster.inter_node_gbps,
             "each GPU's share of the network between nodes, GB/s (400 Gb/s a GPU: 50); required with --nodes > 1");
  add_figure(add, "inter-node-latency-us", f.cluster.inter_node_latency_us,
             "a step's latency between nodes, microseconds; required with --nodes > 1");
  add_figure(add, "host-memory-gb", f.cluster.host_memory_gb, "each node's host memory, for the offload strategies");
  add("gpu-hour-usd", po::value(&f.gpu_hour_usd), "price of one GPU-hour: the cost per 1,000 samples");
  add("min-headroom-gb", po::value(&f.min_headroom_gb)->default_value(1.0),
      "GPU memory each configuration must leave free to count as fitting");
  add("top", po::value(&f.top)->default_value(10), "configurations in the printed table");
  add("output-dir", po::value(&f.output_dir)->default_value("plans"),
      "where plan_<time>.json / .csv (every configuration) and ds_config_planned_<time>.json (the best) go");
  add("validate", po::value(&f.validate)->multitoken(),
      "result files (zero_bench, offload_bench, sweep records): predict each configuration and compare");
}

Json plan_json(const zb::PlannedConfiguration& p, const zb::ClusterSpec& cluster) {
  const zb::TrainingOptions& o = p.options;
  Json pools = Json::object();
  for (zb::MemoryPool pool : zb::kAllMemoryPools) {
    pools[std::string(zb::memory_pool_name(pool))] = double(p.memory.pool(pool)) / 1e9;
  }
  Json j{{"stage", o.zero.stage},
         {"strategy", zb::offload_spec_name(o.offload, o.offload_ratio)},
         {"micro_batch", o.batch},
         {"grad_accum", o.grad_accum},
         {"seq_length", o.seq},
         {"activation_checkpointing", zb::activation_checkpointing_name(o.activation_checkpointing)},
         {"gpus", p.world},
         {"gpus_per_node", cluster.gpus_per_node},
         {"nodes", cluster.node_count()},
         {"fits", p.fits},
         {"why_not", p.why_not},
         {"gpu_memory_gb",
          {{"pools", pools},
           {"engine_peak", double(p.memory.peak) / 1e9},
           {"backend_workspace", p.backend_workspace_gb},
           {"outside_engine", p.outside_engine_gb},
           {"total", p.gpu_total_gb},
           {"headroom", p.headroom_gb}}},
         {"host_memory_gb_per_rank", double(p.memory.host_bytes) / 1e9}};
  if (p.time) {
    const zb::StepTimePrediction& t = *p.time;
    Json collectives = Json::array();
    for (const zb::CollectiveEstimate& c : t.collectives) {
      collectives.push_back({{"kind", zb::collective_kind_name(c.kind)},
                             {"bytes", c.bytes},
                             {"ms", c.time.ms},
                             {"algorithm", c.time.algorithm},
                             {"link", c.time.link}});
    }
    j["step_ms"] = t.step_ms;
    j["phases_ms"] = {{"compute", t.compute_ms},
                      {"optimizer", t.optimizer_ms},
                      {"cpu_optimizer", t.cpu_optimizer_ms},
                      {"copies", t.copies_ms},
                      {"collectives", t.collectives_ms}};
    j["collectives"] = collectives;
    j["basis"] = t.basis;
    j["tokens_per_sec"] = p.tokens_per_s;
    j["tokens_per_sec_per_gpu"] = p.tokens_per_s_per_gpu;
  }
  if (p.cost_per_1000_samples_usd) j["cost_per_1000_samples_usd"] = *p.cost_per_1000_samples_usd;
  return j;
}

std::string csv_cell(const Json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) return "";
  if (v.is_string()) {
    std::string s = v.get<std::string>(), out = "\"";
    for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
  }
  return v.is_null() ? "" : v.dump();
}

// The flat fields of each plan, the same columns for every row.
std::string plans_csv(const std::vector<Json>& plans) {
  const std::vector<std::string> columns{"stage",
                                         "strategy",
                                         "micro_batch",
                                         "grad_accum",
                                         "seq_length",
                                         "activation_checkpointing",
                                         "gpus",
                                         "gpus_per_node",
                                         "nodes",
                                         "fits",
                                         "why_not",
                                         "step_ms",
                                         "tokens_per_sec",
                                         "tokens_per_sec_per_gpu",
                                         "cost_per_1000_samples_usd"};
  std::string out = zb::join(columns, ",") + ",gpu_total_gb,headroom_gb\n";
  for (const Json& p : plans) {
    std::vector<std::string> cells;
    for (const std::string& c : columns) cells.push_back(csv_cell(p.contains(c) ? p.at(c) : Json()));
    cells.push_back(csv_cell(p.at("gpu_memory_gb").at("total")));
    cells.push_back(csv_cell(p.at("gpu_memory_gb").at("headroom")));
    out += zb::join(cells, ",") + "\n";
  }
  return out;
}

std::string time_explanation(const zb::StepTimePrediction& t) {
  std::string out =
      zb::cat("  step ", zb::table_number(t.step_ms, "%.1f"), " ms = compute ", zb::table_number(t.compute_ms, "%.1f"),
              " + optimizer ", zb::table_number(t.optimizer_ms, "%.1f"), " + CPU optimizer ",
              zb::table_number(t.cpu_optimizer_ms, "%.1f"), " + collectives and copies ",
              zb::table_number(t.collectives_ms, "%.1f"), " (of which the one-GPU copies ",
              zb::table_number(t.copies_ms, "%.1f"), ")\n");
  for (const zb::CollectiveEstimate& c : t.collectives) {
    out += zb::cat("  ", zb::collective_kind_name(c.kind), ": ", zb::table_number(c.bytes / 1e9, "%.2f"),
                   " GB a step, ", zb::table_number(c.time.ms, "%.1f"), " ms (", c.time.algorithm, ", bound by the ",
                   c.time.link, " link)\n");
  }
  out += "  basis: " + t.basis + "\n";
  return out;
}

// The value most of the profile's one-GPU entries have for `field`.
template <typename Field>
std::string most_common(const zb::PlanProfile& profile, Field field) {
  std::map<std::string, int> counts;
  for (const zb::ProfiledEntry& e : profile.entries)
    if (e.configuration.world_size == 1) ++counts[field(e.configuration)];
  std::string best;
  int most = 0;
  for (const auto& [value, n] : counts)
    if (n > most) best = value, most = n;
  return best;
}

int validate(const PlanFlags& f, const zb::PlanProfile& profile) {
  const zb::Validation v = zb::validate_plan(profile, f.validate);
  std::printf(
      "%s on %s: %zu configuration(s) predicted from the profile's one-GPU entries and the host's "
      "collective rates\n%s",
      profile.model.c_str(), profile.gpu.c_str(), v.rows.size(), zb::validation_report(v).c_str());
  return 0;
}

int plan(const PlanFlags& f) {
  if (f.profile.empty()) throw zb::UsageError("--profile is required: a model's profile.json, as sweep writes it");
  for (const std::string& file : f.validate)
    if (file.empty()) throw zb::UsageError("--validate needs result files");
  const zb::PlanProfile profile = zb::read_plan_profile(f.profile);
  if (!f.validate.empty()) return validate(f, profile);

  zb::ClusterSpec flags = f.cluster;
  auto take_count = [](int value, int most, const char* flag, int& into) {
    if (value == -1) return;
    if (value < 1 || value > most) throw zb::UsageError(zb::cat(flag, " must be 1 to ", most));
    into = value;
  };
  take_count(f.gpus_per_node, zb::kMaxGpusPerNode, "--gpus-per-node", flags.gpus_per_node);
  take_count(f.nodes, zb::kMaxNodes, "--nodes", flags.nodes);
  zb::check_cluster_figures(flags, [](std::string key) {
    std::replace(key.begin(), key.end(), '_', '-');
    return "--" + key;
  });
  zb::ClusterSpec cluster = f.cluster_file.empty() ? zb::ClusterSpec{} : zb::read_cluster_spec(f.cluster_file);
  cluster = zb::merge(cluster, flags);
  zb::check_plannable(cluster);
  if (!cluster.gpu.empty() && cluster.gpu != profile.gpu) {
    throw zb::UsageError(zb::cat("--cluster: its GPU is ", cluster.gpu, ", the profile's ", profile.gpu,
                                 ": plan a cluster with the profile of its GPU"));
  }
  cluster.gpu = profile.gpu;
  if (!cluster.gpu_memory_gb) cluster.gpu_memory_gb = profile.gpu_capacity_gb();
  if (!cluster.gpu_memory_gb) {
    throw zb::UsageError("the profile does not say how much memory its GPU has: give --gpu-memory-gb");
  }
  if (f.global_batch < 1) throw zb::UsageError("--global-batch-size must be at least 1 (samples an optimizer step)");
  if (f.min_headroom_gb < 0) throw zb::UsageError("--min-headroom-gb must be at least 0");
  if (f.top < 1) throw zb::UsageError("--top must be at least 1");
  if (f.gpu_hour_usd < 0) throw zb::UsageError("--gpu-hour-usd must be at least 0");
  if (f.global_batch % cluster.gpus() != 0) {
    throw zb::UsageError(
        zb::cat("--global-batch-size ", f.global_batch, " does not divide among ", cluster.gpus(), " GPUs"));
  }
  zb::require_writable_folder(f.output_dir, "output-dir");

  zb::PlanSettings settings;
  settings.cluster = cluster;
  settings.global_batch = f.global_batch;
  settings.min_headroom_gb = f.min_headroom_gb;
  if (f.gpu_hour_usd > 0) settings.gpu_hour_usd = f.gpu_hour_usd;
  zb::TrainingOptions& base = settings.base;
  base.model = zb::resolve_model(profile.model);
  if (!f.model.empty()) {
    const zb::TransformerConfig asked = zb::resolve_model(f.model);
    if (asked.norm != base.model.norm || asked.position != base.model.position || asked.mlp != base.model.mlp ||
        asked.qk_norm != base.model.qk_norm || asked.post_norms != base.model.post_norms) {
      throw zb::UsageError(
          zb::cat("--model ", f.model, " is not of ", profile.model,
                  "'s family (its norms, positions or MLP differ): profile it, or a model of its family"));
    }
    base.model = asked;
  }
  const std::string seq = most_common(profile, [](const auto& c) { return std::to_string(c.seq_length); });
  base.seq = f.seq != -1 ? f.seq : seq.empty() ? 0 : std::stoll(seq);
  if (base.seq < 1 || base.seq > base.model.max_seq_len) {
    throw zb::UsageError(
        zb::cat("--seq-length must be between 1 and ", base.model.max_seq_len, " for ", base.model.name));
  }
  base.dtype = zb::parse_dtype(most_common(profile, [](const auto& c) { return c.dtype; }));
  zb::set_optimizer(base.optimizer, most_common(profile, [](const auto& c) { return c.optimizer; }));

  const std::vector<zb::PlannedConfiguration> plans = zb::search_plans(profile, settings);
  std::printf("plan: %s on %d x %d %s (%.0f GB each), global batch %lld x seq %lld, %s %s | %zu configuration(s)\n",
              base.model.name.c_str(), cluster.node_count(), cluster.gpus_per_node, profile.gpu.c_str(),
              *cluster.gpu_memory_gb, (long long)f.global_batch, (long long)base.seq,
              std::string(zb::dtype_name(base.dtype)).c_str(), zb::optimizer_name(base.optimizer).c_str(),
              plans.size());
  std::vector<std::vector<std::string>> rows{
      {"Configuration", "GPU Mem", "Headroom", "Step", "Tokens/s/GPU", "$/1k samples", "Status"}};
  int shown = 0;
  for (const zb::PlannedConfiguration& p : plans) {
    if (shown++ == f.top) break;
    const std::optional<double> step = p.time ? std::optional(p.time->step_ms) : std::nullopt,
                                per_gpu = p.time ? std::optional(p.tokens_per_s_per_gpu) : std::nullopt;
    rows.push_back({p.label(), zb::memory_text(p.gpu_total_gb), zb::memory_text(p.headroom_gb),
                    zb::table_number(step, "%.1f ms"), zb::table_number(per_gpu, "%.0f"),
                    zb::table_number(p.cost_per_1000_samples_usd, "%.4f"), p.fits && p.time ? "fits" : p.why_not});
  }
  std::printf("%s", zb::text_table(rows).c_str());

  std::vector<Json> all;
  for (const zb::PlannedConfiguration& p : plans) all.push_back(plan_json(p, cluster));
  const std::string base_path = zb::reserve_comparison_base(f.output_dir, "plan");
  Json document{{"model", base.model.name},
                {"profiled_model", profile.model},
                {"gpu", profile.gpu},
                {"profile", f.profile},
                {"profile_code_version", profile.code_version},
                {"cluster", zb::to_json(cluster)},
                {"global_batch_size", f.global_batch},
                {"seq_length", base.seq},
                {"plans", all}};
  zb::write_file_atomically(base_path + ".json", document.dump(2) + "\n");
  zb::write_file_atomically(base_path + ".csv", plans_csv(all));
  std::printf("plans: %s.json, %s.csv\n", base_path.c_str(), base_path.c_str());
  if (plans.empty() || !plans.front().fits || !plans.front().time) {
    const bool any_fits = std::any_of(plans.begin(), plans.end(), [](const auto& p) { return p.fits; });
    std::printf("%s: see why_not in the JSON\n",
                any_fits ? "no configuration that fits could be timed" : "no configuration fits");
    return 0;
  }
  zb::PlannedConfiguration best = plans.front();
  // (A DeepSpeed config of nvme names the folder: the user's, which a plan cannot know.)
  const bool nvme = best.options.offload == zb::OffloadStrategy::nvme;
  if (nvme) best.options.nvme_path = "/local_nvme";
  std::printf("best: %s, %.0f tokens/s per GPU\n%s", best.label().c_str(), best.tokens_per_s_per_gpu,
              time_explanation(*best.time).c_str());
  // ds_config_planned_<time>.json beside plan_<time>.json: the name ties it to its plan.
  const fs::path base_file(base_path);
  const std::string ds_path =
      (base_file.parent_path() / ("ds_config_planned" + base_file.filename().string().substr(4) + ".json")).string();
  zb::write_file_atomically(ds_path, zb::deepspeed_config_json(zb::deepspeed_settings(best.options)).dump(2) + "\n");
  std::printf("DeepSpeed config of the best: %s\n", ds_path.c_str());
  const std::string caveat = zb::deepspeed_caveat(best.options);
  if (!caveat.empty()) std::printf("(%s)\n", caveat.c_str());
  if (nvme) std::printf("(its nvme_path, /local_nvme, stands for your NVMe folder)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  PlanFlags flags;
  po::options_description options("plan options");
  add_plan_flags(options, flags);
  const std::string usage =
      "usage: plan --profile profiles/<model>/<gpu>/profile.json --gpus-per-node G [--nodes N] --global-batch-size B "
      "[options]\n       plan --profile P --validate RESULTS.json...\nPredicts every configuration's memory, fit, step "
      "time, tokens/s and cost on a cluster from a model's profile; or predicts measured results and compares.";
  return zb::run_program(argc, argv, usage, options, [&] { return plan(flags); });
}
