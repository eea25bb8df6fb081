// Leveled logging to stderr with a process-wide prefix naming the rank or actor,
// e.g. "[I 14:02:11.123 rank=1] message".
//
//   OOZE_LOG(INFO) << "step " << step << " loss " << loss;
//
// The level comes from OOZE_LOG_LEVEL (debug, info, warn, error) or set_log_level().
#pragma once

#include <sstream>
#include <string>

namespace ooze {

enum class LogLevel { DEBUG = 0, INFO = 1, WARN = 2, ERROR = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
// Parses "debug", "info", "warn"/"warning", "error" (any case); throws ConfigError otherwise.
LogLevel parse_log_level(const std::string& name);

// Shown in every line of this process, e.g. "rank=1" or "TrainActor rank=0".
void set_log_prefix(const std::string& prefix);
std::string log_prefix();

namespace detail {
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace ooze

#define OOZE_LOG(level)                                \
  if (::ooze::LogLevel::level < ::ooze::log_level()) { \
  } else                                               \
    ::ooze::detail::LogLine(::ooze::LogLevel::level).stream()
