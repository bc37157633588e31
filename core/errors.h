// Error types shared by every layer. Each carries a message meant for the person running the program.
#pragma once

#include <stdexcept>
#include <string>

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

// An allocation could not be satisfied (device, pinned or host memory, or a configured limit).
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// A file could not be opened, read or written, or its contents are malformed.
class IoError : public Error {
 public:
  using Error::Error;
};

}  // namespace zb
