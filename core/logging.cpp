#include "core/logging.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "core/error.h"

namespace ooze {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("OOZE_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return LogLevel::INFO;
  try {
    return parse_log_level(env);
  } catch (const ConfigError&) {
    return LogLevel::INFO;
  }
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{initial_level()};
  return level;
}

std::mutex& prefix_mutex() {
  static std::mutex m;
  return m;
}

std::string& prefix_ref() {
  static std::string prefix;
  return prefix;
}

}  // namespace

void set_log_level(LogLevel level) { level_ref().store(level); }
LogLevel log_level() { return level_ref().load(); }

LogLevel parse_log_level(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "debug") return LogLevel::DEBUG;
  if (lower == "info") return LogLevel::INFO;
  if (lower == "warn" || lower == "warning") return LogLevel::WARN;
  if (lower == "error") return LogLevel::ERROR;
  throw ConfigError("unknown log level '" + name + "': expected debug, info, warn or error");
}

void set_log_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(prefix_mutex());
  prefix_ref() = prefix;
}

std::string log_prefix() {
  std::lock_guard<std::mutex> lock(prefix_mutex());
  return prefix_ref();
}

namespace detail {

LogLine::~LogLine() {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm local{};
  localtime_r(&seconds, &local);
  char stamp[16];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &local);
  std::string prefix = log_prefix();
  std::string line = std::string("[") + kLetters[static_cast<int>(level_)] + " " + stamp + "." +
                     std::to_string(1000 + millis).substr(1) +
                     (prefix.empty() ? "" : " " + prefix) + "] " + stream_.str() + "\n";
  // One write per line so lines from concurrent threads and processes do not interleave.
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace detail
}  // namespace ooze
