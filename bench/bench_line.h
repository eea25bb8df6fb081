// One benchmark result as the JSON line DESIGN.md fixes:
//   {"bench": ..., "metric": ..., "value": ..., "unit": ..., "baseline": ..., "ratio": ...}
// Missing or non-finite numbers are written as null (JSON has no NaN).
#pragma once

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

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

}  // namespace ooze::bench
