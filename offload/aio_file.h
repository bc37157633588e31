// AioFile: one file of the NVMe offload store, read and written through Linux native asynchronous I/O
// (libaio) with O_DIRECT, as DeepSpeed's aio engine does: a transfer is cut into block_size pieces, up to
// queue_depth of them in flight per submitting thread, intra_op_parallelism threads. The file is created on
// construction and removed on destruction (also when the run fails, and when a signal ends the process:
// see removal_on_termination.h). On a file system that refuses O_DIRECT (tmpfs) it falls back to buffered
// I/O and says so (direct() is false; callers record it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace zb {

// DeepSpeed's aio settings, names and defaults.
struct AioConfig {
  int64_t block_size = 1 << 20;    // bytes per request
  int queue_depth = 8;             // requests in flight per thread
  int intra_op_parallelism = 1;    // submitting threads per transfer
  bool single_submit = false;      // one request per io_submit call (else all that fit at once)
  bool overlap_events = true;      // refill the queue as requests complete (else wait for the whole batch)
};

// Throws UsageError naming the setting when a value is out of range.
void validate(const AioConfig& config);

class AioFile {
 public:
  // O_DIRECT needs 4 KiB alignment of buffers, offsets and sizes.
  static constexpr size_t kAlignment = 4096;

  // Creates (or truncates) `path`. Throws IoError naming the path when it cannot.
  AioFile(std::string path, AioConfig config);
  ~AioFile();
  AioFile(const AioFile&) = delete;
  AioFile& operator=(const AioFile&) = delete;

  bool direct() const { return direct_; }
  const std::string& path() const { return path_; }

  // Blocking transfers of `bytes` at `offset`. With direct I/O, data, bytes and offset must be multiples of
  // kAlignment. Throws IoError (with the path and the system's reason, e.g. no space left) on failure.
  void write(const void* data, size_t bytes, int64_t offset);
  void read(void* data, size_t bytes, int64_t offset);

  class Context;  // an io_context_t

 private:
  void transfer(bool write, char* data, size_t bytes, int64_t offset);
  // Contexts are kept for reuse: io_destroy waits for an RCU grace period (milliseconds), far too slow to
  // pay per transfer. Transfers running at once (a read-ahead beside a write-behind) take different ones.
  std::unique_ptr<Context> take_context();
  void return_context(std::unique_ptr<Context> context);

  std::mutex contexts_mutex_;
  std::vector<std::unique_ptr<Context>> free_contexts_;
  std::string path_;
  AioConfig config_;
  int fd_ = -1;
  bool direct_ = false;
};

}  // namespace zb
