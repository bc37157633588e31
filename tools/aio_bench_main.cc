// aio_bench: write and read GB/s of the NVMe offload files (AioFile: libaio with O_DIRECT) over a grid of
// DeepSpeed aio settings, to choose the block size and queue depth for a disk and to set beside dd on the same
// folder (scripts/gpu_io_bench.sh). A measurement moves the whole size in one AioFile::write, then one read,
// as the offload store moves a shard. Repeats overwrite the same file, as the store does from its second step
// on; the first write also allocates the file's blocks, which the mean shows and the best leaves out.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/cli.h"
#include "core/errors.h"
#include "core/strings.h"
#include "core/tracking_allocator.h"
#include "offload/aio_file.h"

namespace {

constexpr int64_t kAlignment = int64_t(zb::AioFile::kAlignment);

struct Flags {
  std::string path;
  int64_t bytes = int64_t(2) << 30;
  std::vector<int64_t> block_sizes{262144, 1048576, 4194304, 8388608};
  std::vector<int64_t> queue_depths{4, 8, 16, 32};
  std::vector<int64_t> intra_op_parallelism{1};
  bool single_submit = false;
  bool overlap_events = true;
  int64_t repeats = 3;
  std::string json;
};

// GB/s over the repeats of one direction.
struct Rate {
  double best = 0, mean = 0;
};

Rate rate_of(const std::vector<double>& seconds, int64_t bytes) {
  Rate r;
  for (double s : seconds) {
    r.best = std::max(r.best, double(bytes) / s / 1e9);
    r.mean += double(bytes) / s / 1e9 / double(seconds.size());
  }
  return r;
}

struct Measurement {
  zb::AioConfig config;
  Rate write, read;
};

void require_each(const char* flag, const std::vector<int64_t>& values, const std::function<bool(int64_t)>& ok,
                  const char* accepted) {
  for (int64_t v : values)
    if (!ok(v)) throw zb::UsageError(zb::cat(flag, ": each value must be ", accepted, ", not ", v));
}

bool positive_multiple_of_4096(int64_t v) {
  return v > 0 && v % kAlignment == 0;
}

// Every check that needs no transfer; the folder is probed by creating (and removing) a file in it. Returns
// whether the folder's file system takes O_DIRECT.
bool validate(const Flags& f) {
  if (f.path.empty()) throw zb::UsageError("--path: required: a folder where a temporary file is written");
  if (!std::filesystem::is_directory(f.path))
    throw zb::UsageError(zb::cat("--path: ", f.path, " is not an existing folder"));
  if (!positive_multiple_of_4096(f.bytes))
    throw zb::UsageError(zb::cat("--bytes: must be a positive multiple of 4096, not ", f.bytes));
  require_each("--block-sizes", f.block_sizes, positive_multiple_of_4096, "a positive multiple of 4096");
  require_each(
      "--queue-depths", f.queue_depths, [](int64_t v) { return v >= 1 && v <= 1024; }, "in [1, 1024]");
  require_each(
      "--intra-op-parallelism", f.intra_op_parallelism, [](int64_t v) { return v >= 1 && v <= 64; }, "in [1, 64]");
  if (f.repeats < 1 || f.repeats > 1000)
    throw zb::UsageError(zb::cat("--repeats: must be in [1, 1000], not ", f.repeats));
  if (!f.json.empty()) {
    const std::filesystem::path folder = std::filesystem::absolute(f.json).parent_path();
    if (!std::filesystem::is_directory(folder))
      throw zb::UsageError(zb::cat("--json: folder ", folder.string(), " does not exist"));
  }
  try {
    return zb::AioFile(f.path + "/aio_bench_probe." + std::to_string(::getpid()), zb::AioConfig{}).direct();
  } catch (const zb::IoError& e) {
    throw zb::UsageError(zb::cat("--path: cannot write there: ", e.what()));
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Buffered writes (no O_DIRECT) end in the page cache; flushing them before the timer stops keeps the write
// rate the disk's. Any descriptor of the file flushes its pages.
void flush(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  const bool flushed = fd >= 0 && ::fsync(fd) == 0;
  const int error = errno;
  if (fd >= 0) ::close(fd);
  if (!flushed) throw zb::IoError(zb::cat("fsync of ", path, ": ", std::strerror(error)));
}

Measurement measure(const Flags& f, const zb::AioConfig& config, void* buffer) {
  zb::AioFile file(f.path + "/aio_bench." + std::to_string(::getpid()) + ".bin", config);
  const auto bytes = size_t(f.bytes);
  std::vector<double> writes, reads;
  for (int64_t r = 0; r < f.repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    file.write(buffer, bytes, 0);
    if (!file.direct()) flush(file.path());
    writes.push_back(seconds_since(start));
    start = std::chrono::steady_clock::now();
    file.read(buffer, bytes, 0);
    reads.push_back(seconds_since(start));
  }
  return {config, rate_of(writes, f.bytes), rate_of(reads, f.bytes)};
}

std::vector<zb::AioConfig> grid(const Flags& f) {
  std::vector<zb::AioConfig> configs;
  for (int64_t block : f.block_sizes)
    for (int64_t depth : f.queue_depths)
      for (int64_t threads : f.intra_op_parallelism)
        configs.push_back({block, int(depth), int(threads), f.single_submit, f.overlap_events});
  return configs;
}

std::string setting(const zb::AioConfig& c, bool with_threads) {
  return zb::cat("block ", c.block_size, ", depth ", c.queue_depth,
                 with_threads ? zb::cat(", threads ", c.intra_op_parallelism) : "");
}

void print_best(const std::vector<Measurement>& results, bool with_threads) {
  const Measurement& w = *std::max_element(results.begin(), results.end(),
                                           [](const auto& a, const auto& b) { return a.write.best < b.write.best; });
  const Measurement& r = *std::max_element(results.begin(), results.end(),
                                           [](const auto& a, const auto& b) { return a.read.best < b.read.best; });
  std::printf("best: write %.3f GB/s (%s), read %.3f GB/s (%s)\n", w.write.best,
              setting(w.config, with_threads).c_str(), r.read.best, setting(r.config, with_threads).c_str());
}

void write_json(const std::string& file, const Flags& f, bool direct, const std::vector<Measurement>& results) {
  nlohmann::json records = nlohmann::json::array();
  for (const Measurement& m : results)
    records.push_back({{"block_size", m.config.block_size},
                       {"queue_depth", m.config.queue_depth},
                       {"intra_op_parallelism", m.config.intra_op_parallelism},
                       {"single_submit", m.config.single_submit},
                       {"overlap_events", m.config.overlap_events},
                       {"bytes", f.bytes},
                       {"repeats", f.repeats},
                       {"direct", direct},
                       {"write_gbps_best", m.write.best},
                       {"write_gbps_mean", m.write.mean},
                       {"read_gbps_best", m.read.best},
                       {"read_gbps_mean", m.read.mean}});
  const std::string tmp = file + ".tmp";  // a reader never sees half a file
  std::ofstream out(tmp);
  out << records.dump(2) << "\n";
  out.close();
  if (!out || std::rename(tmp.c_str(), file.c_str()) != 0)
    throw zb::IoError(zb::cat("cannot write ", file, ": ", std::strerror(errno)));
}

int run(const Flags& f) {
  const bool direct = validate(f);
  const std::vector<zb::AioConfig> configs = grid(f);
  std::printf(
      "aio_bench: %s | O_DIRECT %s | %lld bytes per transfer | %zu settings x %lld repeats (best, then mean), %.1f GB "
      "to move\n",
      f.path.c_str(), direct ? "yes" : "no", (long long)f.bytes, configs.size(), (long long)f.repeats,
      2.0 * double(f.bytes) * double(configs.size() * size_t(f.repeats)) / 1e9);
  if (!direct)
    std::printf("warning: this file system refuses O_DIRECT: reads come from the page cache, not the disk\n");
  zb::TrackingAllocator host(std::make_unique<zb::HostMemory>(zb::AioFile::kAlignment));
  zb::Buffer buffer = host.allocate(size_t(f.bytes), zb::MemoryPool::workspace);
  std::memset(buffer.data(), 0x5a, size_t(f.bytes));  // touched before any timer starts
  std::printf("%9s %6s %7s | %10s %10s | %10s %10s\n", "block", "depth", "threads", "write GB/s", "mean", "read GB/s",
              "mean");
  std::vector<Measurement> results;
  for (const zb::AioConfig& config : configs) {
    results.push_back(measure(f, config, buffer.data()));
    const Measurement& m = results.back();
    std::printf("%9lld %6d %7d | %10.3f %10.3f | %10.3f %10.3f\n", (long long)config.block_size, config.queue_depth,
                config.intra_op_parallelism, m.write.best, m.write.mean, m.read.best, m.read.mean);
    std::fflush(stdout);
  }
  print_best(results, f.intra_op_parallelism.size() > 1);
  if (!f.json.empty()) write_json(f.json, f, direct, results);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  namespace po = boost::program_options;
  po::options_description options("aio_bench options");
  options.add_options()  //
      ("path", po::value(&f.path), "folder for the temporary file (required; the file is removed afterwards)")(
          "bytes", po::value(&f.bytes)->default_value(f.bytes), "bytes per transfer, a positive multiple of 4096")(
          "block-sizes",
          po::value(&f.block_sizes)->multitoken()->default_value(f.block_sizes, "262144 1048576 4194304 8388608"),
          "bytes per request, each a positive multiple of 4096")(
          "queue-depths", po::value(&f.queue_depths)->multitoken()->default_value(f.queue_depths, "4 8 16 32"),
          "requests in flight per thread, each in [1, 1024]")(
          "intra-op-parallelism",
          po::value(&f.intra_op_parallelism)->multitoken()->default_value(f.intra_op_parallelism, "1"),
          "submitting threads per transfer, each in [1, 64]")(
          "single-submit",
          po::value(&f.single_submit)->default_value(f.single_submit, f.single_submit ? "true" : "false"),
          "one request per io_submit call (true/false)")(
          "overlap-events",
          po::value(&f.overlap_events)->default_value(f.overlap_events, f.overlap_events ? "true" : "false"),
          "refill the queue as requests complete (true/false)")(
          "repeats", po::value(&f.repeats)->default_value(f.repeats),
          "write-then-read rounds per setting (the best and the mean are shown)")(
          "json", po::value(&f.json), "also write the results to this file, a JSON array with one record per setting");
  return zb::run_program(
      argc, argv,
      "usage: aio_bench --path DIR [options]\n"
      "Write and read GB/s (1 GB = 1e9 bytes) of the NVMe offload files over block sizes x queue depths x threads.",
      options, [&] { return run(f); });
}
