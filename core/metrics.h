// Training metrics as JSON Lines: one object per call, e.g.
//   {"step": 3, "wall_time": 1712345678.25, "elapsed": 4.5, "loss": 0.31, "lr": 0.05}
// `wall_time` is seconds since the Unix epoch, `elapsed` seconds since the sink was created.
//
// The file is opened in append mode (a resumed run continues the same file) and flushed after
// every line, so a crash loses at most the line being written. A resumed run that does steps
// again drops their old lines first (drop_steps_from), so each step is recorded once. JSON has
// no NaN or Infinity: non-finite values are written as null. Safe to call from several threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

namespace ooze {

class MetricsSink {
 public:
  // Creates the parent directory if needed. Throws IoError when the file cannot be opened.
  explicit MetricsSink(const std::string& path);
  ~MetricsSink();
  MetricsSink(const MetricsSink&) = delete;
  MetricsSink& operator=(const MetricsSink&) = delete;

  void log(int64_t step, const std::map<std::string, double>& metrics);

  // A JSON object of metrics (numbers, strings, nested objects). A template only so that a
  // braced list, `log(step, {{"loss", 0.5}})`, unambiguously picks the map overload.
  template <typename Json, typename = std::enable_if_t<std::is_same_v<Json, nlohmann::json>>>
  void log(int64_t step, const Json& metrics) {
    log_object(step, metrics);
  }

  // Rewrites the file (atomically) without its lines of `step` or later, and without a line a
  // crash cut short: a run resumed at `step` records those steps anew. Returns the lines dropped.
  int64_t drop_steps_from(int64_t step);

  // The lines so far on disk (fsync), before a checkpoint that must not outlive them.
  void sync();

  const std::string& path() const { return path_; }

 private:
  void log_object(int64_t step, const nlohmann::json& metrics);

  std::string path_;
  std::FILE* file_ = nullptr;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
};

}  // namespace ooze
