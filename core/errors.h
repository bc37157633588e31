// Error types shared by every layer. Each carries a message meant for the person running the program.
#pragma once

#include <stdexcept>
#include <cstddef>
#include <string>
#include <utility>

namespace zb {

// Something went wrong at run time (a failed library call, a broken invariant, a NaN loss).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input from the command line or a configuration file: refused before any work starts, exit code 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

// An allocation could not be satisfied (device, pinned or host memory, or a configured limit). Where the
// allocator knows them, the pool that asked ("activations") and the bytes it asked for, so that a report can say
// what did not fit without parsing the message.
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& message, std::string pool = {}, size_t bytes = 0)
      : Error(message), pool_(std::move(pool)), bytes_(bytes) {}
  const std::string& pool() const { return pool_; }  // empty: not known
  size_t bytes() const { return bytes_; }            // 0: not known

 private:
  std::string pool_;
  size_t bytes_ = 0;
};

// A file could not be opened, read or written, or its contents are malformed.
class IoError : public Error {
 public:
  using Error::Error;
};

}  // namespace zb
