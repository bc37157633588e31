#include "offload/aio_file.h"

#include <fcntl.h>
#include <libaio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/errors.h"
#include "core/strings.h"
#include "offload/removal_on_termination.h"

namespace zb {

void validate(const AioConfig& c) {
  if (c.block_size < int64_t(AioFile::kAlignment) || c.block_size % int64_t(AioFile::kAlignment) != 0)
    throw UsageError(cat("aio block_size must be a positive multiple of 4096 bytes, not ", c.block_size));
  if (c.queue_depth < 1 || c.queue_depth > 1024)
    throw UsageError(cat("aio queue_depth must be in [1, 1024], not ", c.queue_depth));
  if (c.intra_op_parallelism < 1 || c.intra_op_parallelism > 64)
    throw UsageError(cat("aio intra_op_parallelism must be in [1, 64], not ", c.intra_op_parallelism));
}

AioFile::AioFile(std::string path, AioConfig config) : path_(std::move(path)), config_(config) {
  validate(config);
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);  // tmpfs
  if (fd_ < 0) throw IoError(cat("cannot create ", path_, ": ", std::strerror(errno)));
  remove_files_on_termination();
  register_removal(path_);
}

AioFile::~AioFile() {
  if (fd_ >= 0) ::close(fd_);
  ::unlink(path_.c_str());
  unregister_removal(path_);
}

void AioFile::write(const void* data, size_t bytes, int64_t offset) {
  transfer(true, static_cast<char*>(const_cast<void*>(data)), bytes, offset);
}

void AioFile::read(void* data, size_t bytes, int64_t offset) { transfer(false, static_cast<char*>(data), bytes, offset); }

// An io_context_t for one thread's requests, destroyed with it.
class AioFile::Context {
 public:
  explicit Context(int depth) {
    const int rc = io_setup(depth, &ctx_);
    if (rc < 0) throw IoError(cat("io_setup(", depth, "): ", std::strerror(-rc)));
  }
  ~Context() { io_destroy(ctx_); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  io_context_t get() const { return ctx_; }

 private:
  io_context_t ctx_ = nullptr;
};

std::unique_ptr<AioFile::Context> AioFile::take_context() {
  {
    std::lock_guard<std::mutex> lock(contexts_mutex_);
    if (!free_contexts_.empty()) {
      std::unique_ptr<Context> context = std::move(free_contexts_.back());
      free_contexts_.pop_back();
      return context;
    }
  }
  return std::make_unique<Context>(config_.queue_depth);
}

void AioFile::return_context(std::unique_ptr<Context> context) {
  std::lock_guard<std::mutex> lock(contexts_mutex_);
  free_contexts_.push_back(std::move(context));
}

namespace {

struct Piece {
  char* data;
  size_t bytes;
  int64_t offset;
};

// Finishes a request the kernel cut short after `done` bytes with plain pwrite/pread, as write(2) loops do:
// that completes it, or fails with the system's reason (ENOSPC when the disk filled up mid-request), which a
// short count alone does not give. Reading past the end of the file is an error too.
void finish_short_request(int fd, bool write, const Piece& p, size_t done, const std::string& path) {
  const std::string what = cat(write ? "short write to " : "short read from ", path, " at offset ", p.offset, " (",
                               done, " of ", p.bytes, " bytes); ", write ? "writing" : "reading", " the rest: ");
  while (done < p.bytes) {
    const ssize_t n = write ? ::pwrite(fd, p.data + done, p.bytes - done, p.offset + int64_t(done))
                            : ::pread(fd, p.data + done, p.bytes - done, p.offset + int64_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw IoError(cat(what, std::strerror(errno)));
    if (n == 0) throw IoError(cat(what, write ? "no progress" : "end of file"));
    done += size_t(n);
  }
}

// Runs `pieces` through one context: up to `depth` in flight; refilled as they complete (overlap) or batch
// by batch. Throws IoError on a failed request, or a short one that cannot be finished.
// After an error the context may still hold requests in flight; the caller drops it rather than reuse it.
void run_pieces(AioFile::Context& ctx, int fd, bool write, const std::vector<Piece>& pieces, const AioConfig& config,
                const std::string& path) {
  std::vector<iocb> blocks(pieces.size());
  size_t next = 0, in_flight = 0;
  std::vector<io_event> events(size_t(config.queue_depth));
  auto submit = [&](size_t count) {
    std::vector<iocb*> batch;
    for (size_t k = 0; k < count; ++k, ++next) {
      const Piece& p = pieces[next];
      iocb& cb = blocks[next];
      if (write) io_prep_pwrite(&cb, fd, p.data, p.bytes, p.offset);
      else io_prep_pread(&cb, fd, p.data, p.bytes, p.offset);
      cb.data = const_cast<Piece*>(&p);
      batch.push_back(&cb);
    }
    const size_t per_call = config.single_submit ? 1 : batch.size();
    for (size_t done = 0; done < batch.size();) {
      const int rc = io_submit(ctx.get(), long(std::min(per_call, batch.size() - done)), batch.data() + done);
      if (rc < 0) throw IoError(cat("io_submit on ", path, ": ", std::strerror(-rc)));
      done += size_t(rc);
      in_flight += size_t(rc);
    }
  };
  while (next < pieces.size() || in_flight > 0) {
    const size_t room = size_t(config.queue_depth) - in_flight;
    // Without overlap_events a new batch starts only when the last one has fully completed.
    if (next < pieces.size() && (config.overlap_events || in_flight == 0))
      submit(std::min(room, pieces.size() - next));
    const long wanted = config.overlap_events ? 1 : long(in_flight);
    const int got = io_getevents(ctx.get(), wanted, long(in_flight), events.data(), nullptr);
    if (got < 0) throw IoError(cat("io_getevents on ", path, ": ", std::strerror(-got)));
    for (int e = 0; e < got; ++e) {
      const Piece& p = *static_cast<const Piece*>(events[e].data);
      const long res = long(events[e].res);
      if (res < 0)
        throw IoError(
            cat(write ? "writing " : "reading ", path, " at offset ", p.offset, ": ", std::strerror(int(-res))));
      if (size_t(res) != p.bytes) finish_short_request(fd, write, p, size_t(res), path);
    }
    in_flight -= size_t(got);
  }
}

}  // namespace

void AioFile::transfer(bool write, char* data, size_t bytes, int64_t offset) {
  if (direct_) {
    ZB_CHECK(reinterpret_cast<uintptr_t>(data) % kAlignment == 0 && bytes % kAlignment == 0 &&
                 offset % int64_t(kAlignment) == 0,
             "direct I/O needs 4 KiB-aligned buffers, sizes and offsets (", path_, ")");
  }
  // Pieces of block_size, dealt round-robin to the threads.
  const int threads = config_.intra_op_parallelism;
  std::vector<std::vector<Piece>> work(static_cast<size_t>(threads));
  size_t index = 0;
  for (size_t done = 0; done < bytes; done += size_t(config_.block_size), ++index) {
    const size_t piece = std::min(size_t(config_.block_size), bytes - done);
    work[index % size_t(threads)].push_back({data + done, piece, offset + int64_t(done)});
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto run = [&](size_t t) {
    if (work[t].empty()) return;
    try {
      std::unique_ptr<Context> context = take_context();
      run_pieces(*context, fd_, write, work[t], config_, path_);
      return_context(std::move(context));  // only a context whose requests all completed is reused
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(run, size_t(t));
  run(0);
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace zb
