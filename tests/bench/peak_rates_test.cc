// The peak rates (bench/peak_rates.h) on the CPU backend: what it cannot measure is absent, the NVMe folder's
// rates are measured and its file removed, a folder that cannot take a file costs nothing but those rates, and
// ranks (threads of this process here, over a communicator of shared memory) make the same calls in the same
// order and return the same numbers, also when one of them fails. On a GPU (skipped without one): every rate
// one rank can measure.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/peak_rates.h"
#include "comm/local_communicator.h"
#include "core/cuda_devices.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_backend.h"
#include "support/temp_dir.h"

namespace zb {
namespace {

namespace fs = std::filesystem;

bool positive_and_finite(const std::optional<double>& rate) { return rate && std::isfinite(*rate) && *rate > 0; }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// One rank: the CPU backend, host memory and the single-process communicator, as the engine's tests build them.
struct OneRank {
  CpuBackend backend;
  TrackingAllocator allocator{std::make_unique<HostMemory>()};
  LocalCommunicator comm{[this](const Tensor& src, Tensor& dst) { backend.copy(src, dst); }};

  PeakRates measure(const std::string& folder) {
    return measure_peak_rates(backend, allocator, comm, DType::f32, folder);
  }
};

void expect_no_device_rates(const PeakRates& r) {
  EXPECT_FALSE(r.gemm_tflops);
  EXPECT_FALSE(r.memory_gbps);
  EXPECT_FALSE(r.host_to_device_gbps);
  EXPECT_FALSE(r.device_to_host_gbps);
}

TEST(PeakRates, CpuBackendWithoutFolderMeasuresOnlyTheCpuOptimizer) {
  OneRank rank;
  const PeakRates r = rank.measure("");
  expect_no_device_rates(r);
  // The host's own rate: AdamW over 4Mi parameters, a few hundred million a second or more on any CPU.
  EXPECT_TRUE(positive_and_finite(r.host_optimizer_gparams_per_s)) << r.how;
  EXPECT_GT(*r.host_optimizer_gparams_per_s, 0.01) << r.how;
  EXPECT_EQ(r.ranks_per_host, 1);
  EXPECT_TRUE(contains(r.how, "CPU optimizer: AdamW over 4Mi parameters a rank")) << r.how;
  EXPECT_FALSE(r.collective_bus_gbps);
  EXPECT_EQ(r.world_size, 1);
  EXPECT_FALSE(r.nvme_read_gbps);
  EXPECT_FALSE(r.nvme_write_gbps);
  EXPECT_TRUE(contains(r.how, "NVMe: no folder")) << r.how;
  EXPECT_TRUE(contains(r.how, "one rank")) << r.how;
  EXPECT_EQ(r.how.find('\n'), std::string::npos);
}

TEST(PeakRates, WritableFolderGivesNvmeRatesAndIsLeftEmpty) {
  test::TempDir dir;
  OneRank rank;
  const PeakRates r = rank.measure(dir.path().string());
  EXPECT_TRUE(positive_and_finite(r.nvme_write_gbps)) << r.how;
  EXPECT_TRUE(positive_and_finite(r.nvme_read_gbps)) << r.how;
  expect_no_device_rates(r);
  EXPECT_FALSE(r.collective_bus_gbps);
  EXPECT_TRUE(fs::is_empty(dir.path())) << "the measurement's file was left behind";
  EXPECT_TRUE(contains(r.how, "NVMe 64 MiB")) << r.how;
  EXPECT_TRUE(contains(r.how, "AioFile")) << r.how;
  EXPECT_FALSE(contains(r.how, "not measured")) << r.how;
  // Everything it allocated from the caller's allocator is back.
  EXPECT_EQ(rank.allocator.total().current, 0u);
}

TEST(PeakRates, MissingFolderCostsOnlyTheNvmeRates) {
  test::TempDir dir;
  const std::string missing = dir / "no_such_folder";
  OneRank rank;
  PeakRates r;
  EXPECT_NO_THROW(r = rank.measure(missing));
  EXPECT_FALSE(r.nvme_write_gbps);
  EXPECT_FALSE(r.nvme_read_gbps);
  EXPECT_TRUE(contains(r.how, "NVMe write, NVMe read not measured")) << r.how;
  EXPECT_TRUE(contains(r.how, missing)) << r.how;
  EXPECT_TRUE(contains(r.how, "No such file or directory")) << r.how;
  EXPECT_FALSE(fs::exists(missing)) << "the folder must not be made";
}

TEST(PeakRates, FolderThatIsAFileCostsOnlyTheNvmeRates) {
  // A file where the folder should be: refused even to root, whom permissions do not stop.
  test::TempDir dir;
  const std::string file = dir / "a_file";
  std::ofstream(file) << "not a folder";
  OneRank rank;
  PeakRates r;
  EXPECT_NO_THROW(r = rank.measure(file));
  EXPECT_FALSE(r.nvme_write_gbps);
  EXPECT_FALSE(r.nvme_read_gbps);
  EXPECT_TRUE(contains(r.how, "Not a directory")) << r.how;
  EXPECT_EQ(fs::file_size(file), 12u);
}

TEST(PeakRates, JsonHasEveryFieldNullWhereAbsent) {
  PeakRates r;
  r.gemm_tflops = 700.5;
  r.nvme_read_gbps = 6.25;
  r.world_size = 4;
  r.how = "how";
  const nlohmann::ordered_json j = to_json(r);
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"gemm_tflops", "memory_gbps", "host_to_device_gbps",
                                            "device_to_host_gbps", "collective_bus_gbps", "world_size",
                                            "nvme_read_gbps", "nvme_write_gbps", "host_optimizer_gparams_per_s",
                                            "ranks_per_host", "how"}));
  EXPECT_EQ(j["gemm_tflops"], 700.5);
  EXPECT_EQ(j["nvme_read_gbps"], 6.25);
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["how"], "how");
  for (const char* absent :
       {"memory_gbps", "host_to_device_gbps", "device_to_host_gbps", "collective_bus_gbps", "nvme_write_gbps",
        "host_optimizer_gparams_per_s"})
    EXPECT_TRUE(j[absent].is_null()) << absent;

  // And a measurement's, through a JSON round trip.
  OneRank rank;
  const nlohmann::ordered_json measured = nlohmann::ordered_json::parse(to_json(rank.measure("")).dump());
  EXPECT_EQ(measured.size(), 11u);
  EXPECT_TRUE(measured["gemm_tflops"].is_null());
  EXPECT_TRUE(measured["nvme_read_gbps"].is_null());
  EXPECT_EQ(measured["world_size"], 1);
}

// Ranks as threads of this process: host sums, barriers and an f32 all-reduce over shared memory, each call
// returning once every rank has made it. Each rank logs the calls it made, so that a test can check that the
// ranks made the same ones in the same order (a barrier would let mismatched calls pass each other).
struct ThreadWorld {
  explicit ThreadWorld(int ranks) : size(ranks), sync(ranks), values(size_t(ranks)), tensors(size_t(ranks)) {}
  int size;
  std::barrier<> sync;
  std::vector<double> values;
  std::vector<Tensor> tensors;
};

class ThreadRank final : public Communicator {
 public:
  ThreadRank(ThreadWorld& world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_.size; }
  std::string describe() const override { return "threads"; }

  CommTicket all_reduce_sum(Tensor& data) override {
    calls.push_back("all_reduce " + std::to_string(data.numel()));
    if (data.dtype != DType::f32) throw std::logic_error("the test's all-reduce sums f32 only");
    world_.tensors[size_t(rank_)] = data;
    world_.sync.arrive_and_wait();
    std::vector<float> sum(size_t(data.numel()), 0.0f);
    for (const Tensor& t : world_.tensors) {
      if (t.numel() != data.numel()) throw std::logic_error("all-reduce of different sizes");
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += t.as<float>()[i];
    }
    world_.sync.arrive_and_wait();  // every rank has read every rank's data
    std::copy(sum.begin(), sum.end(), data.as<float>());
    world_.sync.arrive_and_wait();
    return ++tickets_;
  }
  CommTicket reduce_scatter_sum(const Tensor&, Tensor&) override { return unused("reduce_scatter_sum"); }
  CommTicket all_gather(const Tensor&, Tensor&) override { return unused("all_gather"); }
  CommTicket broadcast(Tensor&, int) override { return unused("broadcast"); }
  void wait(CommTicket) override {}
  CommTicket copy(const Tensor&, Tensor&) override { return unused("copy"); }
  void host_wait(CommTicket) override {}
  void after_issued(std::function<void()> done) override { done(); }

  double sum_over_ranks(double value) override {
    calls.push_back("sum_over_ranks");
    return sum(value);
  }
  bool all_ok(bool ok) override {
    calls.push_back("all_ok");
    return sum(ok ? 0 : 1) == 0;
  }
  void barrier() override {
    calls.push_back("barrier");
    world_.sync.arrive_and_wait();
  }

  std::vector<std::string> calls;

 private:
  double sum(double value) {
    world_.values[size_t(rank_)] = value;
    world_.sync.arrive_and_wait();
    double total = 0;
    for (double v : world_.values) total += v;
    world_.sync.arrive_and_wait();  // every rank has read the values before any writes its next
    return total;
  }
  CommTicket unused(const char* what) {
    calls.push_back(what);
    throw std::logic_error(std::string(what) + " is not expected of the peak rates");
  }

  ThreadWorld& world_;
  int rank_;
  CommTicket tickets_ = 0;
};

struct RankRun {
  PeakRates rates;
  std::vector<std::string> calls;
  size_t left_allocated = 0;
  std::exception_ptr error;
};

// Every rank measures on a thread of its own, with a CPU backend and an allocator of its own (`limits`: a cap on
// each rank's allocator, none where absent).
std::vector<RankRun> measure_on_threads(int ranks, const std::string& folder,
                                        const std::vector<std::optional<size_t>>& limits = {}) {
  ThreadWorld world(ranks);
  std::vector<RankRun> runs(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      RankRun& run = runs[size_t(r)];
      ThreadRank comm(world, r);
      CpuBackend backend;
      TrackingAllocator allocator(std::make_unique<HostMemory>(),
                                  size_t(r) < limits.size() ? limits[size_t(r)] : std::nullopt);
      try {
        run.rates = measure_peak_rates(backend, allocator, comm, DType::f32, folder);
      } catch (...) {
        run.error = std::current_exception();
      }
      run.calls = comm.calls;
      run.left_allocated = allocator.total().current;
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

std::string describe_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

void expect_same_on_every_rank(const std::vector<RankRun>& runs) {
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_FALSE(runs[r].error) << "rank " << r << " threw: " << describe_error(runs[r].error);
    EXPECT_EQ(runs[r].calls, runs[0].calls) << "rank " << r << " made other collective calls than rank 0";
    EXPECT_EQ(runs[r].left_allocated, 0u) << "rank " << r;
    nlohmann::ordered_json numbers = to_json(runs[r].rates), first = to_json(runs[0].rates);
    numbers.erase("how");
    first.erase("how");
    EXPECT_EQ(numbers, first) << "rank " << r;
  }
}

TEST(PeakRates, RanksAgreeOnTheSlowestRanksRates) {
  test::TempDir dir;
  const std::vector<RankRun> runs = measure_on_threads(2, dir.path().string());
  expect_same_on_every_rank(runs);
  const PeakRates& r = runs[0].rates;
  EXPECT_EQ(r.world_size, 2);
  EXPECT_TRUE(positive_and_finite(r.collective_bus_gbps)) << r.how;
  EXPECT_TRUE(positive_and_finite(r.nvme_write_gbps)) << r.how;
  EXPECT_TRUE(positive_and_finite(r.nvme_read_gbps)) << r.how;
  expect_no_device_rates(r);
  EXPECT_TRUE(contains(r.how, "all-reduce 16 MiB fp32 over 2 ranks")) << r.how;
  EXPECT_TRUE(contains(r.how, "slowest rank")) << r.how;
  EXPECT_FALSE(contains(r.how, "not measured")) << r.how;
  EXPECT_TRUE(fs::is_empty(dir.path())) << "a rank's file was left behind";
  // The collective ran, and was timed after its warm-ups.
  int all_reduces = 0;
  for (const std::string& call : runs[0].calls) all_reduces += call.rfind("all_reduce", 0) == 0;
  EXPECT_GT(all_reduces, 1);
}

TEST(PeakRates, OneRankOutOfMemoryCostsEveryRankTheCollectiveOnly) {
  // Rank 1 cannot allocate the all-reduce's buffer; rank 0 can, but must not run the collective alone.
  test::TempDir dir;
  const std::vector<RankRun> runs = measure_on_threads(2, dir.path().string(), {std::nullopt, size_t(1) << 20});
  expect_same_on_every_rank(runs);
  for (const RankRun& run : runs) {
    EXPECT_FALSE(run.rates.collective_bus_gbps) << run.rates.how;
    EXPECT_TRUE(contains(run.rates.how, "all-reduce not measured (failed on 1 of 2 ranks)")) << run.rates.how;
    EXPECT_TRUE(positive_and_finite(run.rates.nvme_write_gbps)) << run.rates.how;
    EXPECT_TRUE(positive_and_finite(run.rates.nvme_read_gbps)) << run.rates.how;
  }
  EXPECT_TRUE(contains(runs[1].rates.how, "rank 1: ")) << "the failing rank says why: " << runs[1].rates.how;
  for (const std::string& call : runs[0].calls) EXPECT_NE(call.rfind("all_reduce", 0), 0u) << "ran alone";
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(PeakRates, GpuMeasuresEveryRateOfOneRank) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  TrackingAllocator allocator(make_device_memory(Device::cuda(0)));
  const std::unique_ptr<Backend> backend = make_backend(Device::cuda(0), allocator, BackendOptions{});
  LocalCommunicator comm([&](const Tensor& src, Tensor& dst) { backend->copy(src, dst); });
  test::TempDir dir;
  const PeakRates r = measure_peak_rates(*backend, allocator, comm, DType::bf16, dir.path().string());
  // Positive, and below what no GPU, host link or disk of today reaches (a wrong unit is a factor of 1000).
  const auto within = [](const std::optional<double>& rate, double bound) {
    return positive_and_finite(rate) && *rate < bound;
  };
  EXPECT_TRUE(within(r.gemm_tflops, 10'000)) << r.how;
  EXPECT_TRUE(within(r.memory_gbps, 50'000)) << r.how;
  EXPECT_TRUE(within(r.host_to_device_gbps, 1'000)) << r.how;
  EXPECT_TRUE(within(r.device_to_host_gbps, 1'000)) << r.how;
  EXPECT_TRUE(positive_and_finite(r.nvme_write_gbps)) << r.how;
  EXPECT_TRUE(positive_and_finite(r.nvme_read_gbps)) << r.how;
  EXPECT_FALSE(r.collective_bus_gbps);
  EXPECT_FALSE(contains(r.how, "not measured")) << r.how;
  EXPECT_TRUE(fs::is_empty(dir.path()));
  std::printf("%s\n", to_json(r).dump().c_str());  // the figures, for whoever reads the log
  // The backend keeps the scratch its first GEMM took; a second measurement leaves the allocator as it found it.
  const size_t kept = allocator.total().current;
  const PeakRates again = measure_peak_rates(*backend, allocator, comm, DType::bf16, "");
  EXPECT_TRUE(positive_and_finite(again.gemm_tflops)) << again.how;
  EXPECT_EQ(allocator.total().current, kept);
}

}  // namespace
}  // namespace zb
