// What the benchmarks share: the JSON result line DESIGN.md fixes,
//   {"bench": ..., "metric": ..., "value": ..., "unit": ..., "baseline": ..., "ratio": ...}
// (missing or non-finite numbers written as null: JSON has no NaN), a stopwatch, and a
// temporary directory removed at exit, and the environment of the processes a benchmark starts.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace ooze::bench {

inline std::string json_number(std::optional<double> value) {
  if (!value || !std::isfinite(*value)) return "null";
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", *value);
  return text;
}

inline void print_line(const std::string& bench, const std::string& metric, double value,
                       const std::string& unit, std::optional<double> baseline,
                       std::optional<double> ratio) {
  std::printf(
      "{\"bench\": \"%s\", \"metric\": \"%s\", \"value\": %s, \"unit\": \"%s\", "
      "\"baseline\": %s, \"ratio\": %s}\n",
      bench.c_str(), metric.c_str(), json_number(value).c_str(), unit.c_str(),
      json_number(baseline).c_str(), json_number(ratio).c_str());
  std::fflush(stdout);
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A fresh directory under the system temp directory ("<tag>-XXXXXX"), removed with what it holds
// when the object goes.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& tag) {
    const std::filesystem::path base = std::filesystem::temp_directory_path();
    std::string pattern = (base / (tag + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw IoError("cannot create a temporary directory under " + base.string());
    }
    dir_ = pattern;
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  // `name` inside the directory.
  std::string path(const std::string& name) const {
    return (std::filesystem::path(dir_) / name).string();
  }

 private:
  std::string dir_;
};

// This process's environment ("NAME=value" each) with OMP_NUM_THREADS=1, for the processes a
// benchmark starts: they share the machine's cores, one intra-op thread each.
inline std::vector<std::string> one_thread_environment() {
  std::vector<std::string> environment{"OMP_NUM_THREADS=1"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("OMP_NUM_THREADS=", 0) != 0) environment.emplace_back(*e);
  }
  return environment;
}

}  // namespace ooze::bench
