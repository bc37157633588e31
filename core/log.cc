#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace zb {

namespace {

LogLevel threshold_from_environment() {
  const char* value = std::getenv("ZB_LOG_LEVEL");
  if (!value) return LogLevel::info;
  if (!std::strcmp(value, "debug")) return LogLevel::debug;
  if (!std::strcmp(value, "warn")) return LogLevel::warn;
  if (!std::strcmp(value, "error")) return LogLevel::error;
  return LogLevel::info;
}

const char* prefix(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return "debug: ";
    case LogLevel::info: return "";
    case LogLevel::warn: return "warning: ";
    case LogLevel::error: return "error: ";
  }
  return "";
}

}  // namespace

void log_message(LogLevel level, const std::string& text) {
  static const LogLevel threshold = threshold_from_environment();
  static std::mutex mutex;
  if (level < threshold) return;
  std::lock_guard lock(mutex);
  std::fprintf(stderr, "%s%s\n", prefix(level), text.c_str());
}

}  // namespace zb
