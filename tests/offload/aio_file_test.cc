// The NVMe offload files: data written through libaio reads back bit for bit under every DeepSpeed aio
// setting that changes the request pattern; the file is removed with its owner; a path that cannot be
// created is an IoError that names it; a full disk is an IoError with the system's reason, not a hang or a
// silent success, and the file still goes with its owner; a file system that refuses O_DIRECT (tmpfs) falls
// back to buffered I/O and says so; misaligned direct transfers and bad settings are refused.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include <filesystem>
#include <cstring>
#include <random>

#include "core/errors.h"
#include "core/tracking_allocator.h"
#include "offload/aio_file.h"
#include "support/temp_dir.h"

namespace zb {
namespace {

struct Pattern {
  int64_t block_size;
  int queue_depth, threads;
  bool single_submit, overlap_events;
};

class AioFileRoundTrip : public ::testing::TestWithParam<Pattern> {};

TEST_P(AioFileRoundTrip, ReadsBackWhatItWrote) {
  const Pattern p = GetParam();
  test::TempDir dir;
  const AioConfig config{p.block_size, p.queue_depth, p.threads, p.single_submit, p.overlap_events};
  TrackingAllocator host(std::make_unique<HostMemory>(AioFile::kAlignment));
  const size_t bytes = 37 * AioFile::kAlignment + (size_t(1) << 20);  // not a whole number of blocks
  Buffer out = host.allocate(bytes, MemoryPool::workspace), in = host.allocate(bytes, MemoryPool::workspace);
  std::mt19937 rng(5);
  auto* src = static_cast<uint32_t*>(out.data());
  for (size_t i = 0; i < bytes / 4; ++i) src[i] = rng();
  std::string path;
  {
    AioFile file(dir / "shard.bin", config);
    path = file.path();
    file.write(out.data(), bytes, 0);
    file.write(out.data(), 8 * AioFile::kAlignment, int64_t(bytes));  // a second region, after the first
    std::memset(in.data(), 0xab, bytes);
    file.read(in.data(), bytes, 0);
    EXPECT_EQ(std::memcmp(in.data(), out.data(), bytes), 0);
    file.read(in.data(), 8 * AioFile::kAlignment, int64_t(bytes));
    EXPECT_EQ(std::memcmp(in.data(), out.data(), 8 * AioFile::kAlignment), 0);
    EXPECT_EQ(std::filesystem::file_size(path), bytes + 8 * AioFile::kAlignment);
  }
  EXPECT_FALSE(std::filesystem::exists(path)) << "the file goes with its owner";
}

const auto kSettings = ::testing::Values(Pattern{1 << 20, 8, 1, false, true},    // DeepSpeed's defaults
                                         Pattern{4096, 1, 1, false, true},       // one small request at a time
                                         Pattern{65536, 4, 3, true, true},       // threads, single submit
                                         Pattern{131072, 16, 2, false, false});  // batch by batch

// Test names that say the setting, e.g. block65536_depth4_threads3_single_overlap.
std::string setting_name(const ::testing::TestParamInfo<Pattern>& info) {
  const Pattern& p = info.param;
  return "block" + std::to_string(p.block_size) + "_depth" + std::to_string(p.queue_depth) + "_threads" +
         std::to_string(p.threads) + (p.single_submit ? "_single" : "_batched") +
         (p.overlap_events ? "_overlap" : "_wait");
}

INSTANTIATE_TEST_SUITE_P(Settings, AioFileRoundTrip, kSettings, setting_name);

// A tmpfs of `size` on a fresh folder for the guard's life: a disk that fills up on demand. Mounting needs
// CAP_SYS_ADMIN; where it is refused, mounted() is false and error() says why.
class TinyTmpfs {
 public:
  explicit TinyTmpfs(const std::string& size) {
    mounted_ = ::mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~TinyTmpfs() {  // before dir_ goes; a lazy unmount if something still holds it
    if (mounted_ && ::umount(dir_.path().c_str()) != 0) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  TinyTmpfs(const TinyTmpfs&) = delete;
  TinyTmpfs& operator=(const TinyTmpfs&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  std::string operator/(const std::string& name) const { return dir_ / name; }

 private:
  test::TempDir dir_;
  bool mounted_ = false;
  std::string error_;
};

class AioFileNoSpace : public ::testing::TestWithParam<Pattern> {};

// The disk fills up between requests (1 MiB: the kernel fails the next one with ENOSPC) or in the middle of
// one (1100 KiB: the kernel completes it short and says nothing of why).
TEST_P(AioFileNoSpace, IsAnIoErrorWithTheSystemsReasonAndTheFileIsRemoved) {
  const Pattern p = GetParam();
  const AioConfig config{p.block_size, p.queue_depth, p.threads, p.single_submit, p.overlap_events};
  TrackingAllocator host(std::make_unique<HostMemory>(AioFile::kAlignment));
  const size_t bytes = size_t(4) << 20;  // more than either disk holds
  Buffer data = host.allocate(bytes, MemoryPool::workspace);
  std::memset(data.data(), 0x5a, bytes);
  for (const char* size : {"1m", "1100k"}) {
    SCOPED_TRACE(std::string("tmpfs size=") + size);
    TinyTmpfs disk(size);
    if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << disk.error();
    const std::string path = disk / "shard.bin";
    {
      AioFile file(path, config);
      try {
        file.write(data.data(), bytes, 0);
        ADD_FAILURE() << "4 MiB written to a file system of " << size;
      } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(std::strerror(ENOSPC)), std::string::npos) << e.what();
      }
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << "the file goes with its owner, also after a failure";
  }
}

INSTANTIATE_TEST_SUITE_P(Settings, AioFileNoSpace, kSettings, setting_name);

TEST(AioFile, AnUncreatablePathIsAnIoErrorNamingIt) {
  try {
    AioFile file("/nonexistent-folder/shard.bin", AioConfig{});
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-folder/shard.bin"), std::string::npos) << e.what();
  }
}

TEST(AioFile, TmpfsFallsBackToBufferedIo) {
  if (!std::filesystem::exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string path = "/dev/shm/zb_aio_fallback_" + std::to_string(::getpid());
  // Linux 6.6 and later give tmpfs O_DIRECT; there the fallback cannot be exercised this way.
  const int probe = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
  if (probe >= 0) {
    ::close(probe);
    ::unlink(path.c_str());
    GTEST_SKIP() << "this kernel's tmpfs accepts O_DIRECT";
  }
  AioFile file(path, AioConfig{});
  EXPECT_FALSE(file.direct()) << "tmpfs refuses O_DIRECT";
  std::vector<char> data(1000, 'x'), back(1000);
  file.write(data.data(), data.size(), 3);  // buffered: any alignment
  file.read(back.data(), back.size(), 3);
  EXPECT_EQ(data, back);
}

TEST(AioFile, RefusesMisalignedDirectTransfersAndBadSettings) {
  test::TempDir dir;
  AioFile file(dir / "shard.bin", AioConfig{});
  if (file.direct()) {
    std::vector<char> data(5000);
    EXPECT_THROW(file.write(data.data(), 5000, 0), Error);
  }
  EXPECT_THROW(validate(AioConfig{1000, 8, 1, false, true}), UsageError);
  EXPECT_THROW(validate(AioConfig{1 << 20, 0, 1, false, true}), UsageError);
  EXPECT_THROW(validate(AioConfig{1 << 20, 8, 0, false, true}), UsageError);
}

}  // namespace
}  // namespace zb

namespace zb {
namespace {

// A rank ended by a signal (MPI_Abort sends SIGTERM to the other ranks of a failed job) runs no destructor:
// its NVMe file must still go. The child process makes a file, then is terminated with the file open.
TEST(AioFileDeathTest, ASignalThatEndsTheProcessRemovesTheFile) {
  GTEST_FLAG_SET(death_test_style, "fast");  // forked here: the child's path is this one
  test::TempDir dir;
  const std::string path = (dir.path() / "rank0.optim").string();
  EXPECT_EXIT(
      {
        AioFile file(path, AioConfig{});
        if (!std::filesystem::exists(path)) std::_Exit(3);  // (the file must have existed to be removed)
        ::raise(SIGTERM);
        std::_Exit(4);
      },
      ::testing::KilledBySignal(SIGTERM), "");
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace zb
