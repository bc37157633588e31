// A small logger to stderr. Messages below the level set by set_log_level (info until then; the programs set
// it from ZB_LOG_LEVEL, kernels/backend_options.h) are dropped. Thread-safe: one line is written at a time.
#pragma once

#include <string>

#include "core/strings.h"

namespace zb {

enum class LogLevel { debug, info, warn, error };

void set_log_level(LogLevel level);
void log_message(LogLevel level, const std::string& text);

template <typename... Parts>
void log_info(Parts&&... parts) {
  log_message(LogLevel::info, cat(std::forward<Parts>(parts)...));
}
template <typename... Parts>
void log_warn(Parts&&... parts) {
  log_message(LogLevel::warn, cat(std::forward<Parts>(parts)...));
}
template <typename... Parts>
void log_debug(Parts&&... parts) {
  log_message(LogLevel::debug, cat(std::forward<Parts>(parts)...));
}

}  // namespace zb
