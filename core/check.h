// ZB_CHECK: verifies an invariant and throws zb::Error naming the condition and the source location.
// Used for programming errors and mismatched shapes, not for user input (that is UsageError).
#pragma once

#include "core/errors.h"
#include "core/strings.h"

#define ZB_CHECK(condition, ...)                                                                  \
  do {                                                                                            \
    if (!(condition)) {                                                                           \
      throw ::zb::Error(::zb::cat(__FILE__, ":", __LINE__, ": check failed: " #condition " ",      \
                                  ##__VA_ARGS__));                                                \
    }                                                                                             \
  } while (0)
