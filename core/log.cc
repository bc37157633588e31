#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace zb {

namespace {

std::atomic<LogLevel> threshold{LogLevel::info};

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

void set_log_level(LogLevel level) {
  threshold = level;
}

void log_message(LogLevel level, const std::string& text) {
  static std::mutex mutex;
  if (level < threshold) return;
  std::lock_guard lock(mutex);
  std::fprintf(stderr, "%s%s\n", prefix(level), text.c_str());
}

}  // namespace zb
