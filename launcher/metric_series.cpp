#include "launcher/metric_series.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace ooze::launcher {
namespace {

using nlohmann::json;

// Written by MetricsSink and the train loop on every line: the x axis or bookkeeping.
const std::set<std::string> kReservedKeys = {"step", "wall_time", "elapsed", "train/step"};

// Adds the numbers under `value` (flattening objects with '/') to their series at `x`.
void collect_metric(const json& value, const std::string& key, double x,
                    std::map<std::string, MetricSeries>& series) {
  if (value.is_object()) {
    for (const auto& [name, inner] : value.items()) {
      collect_metric(inner, key.empty() ? name : key + "/" + name, x, series);
    }
    return;
  }
  if (!value.is_number() && !value.is_null()) return;
  MetricSeries& metric = series[key];
  metric.key = key;
  metric.points[x] =
      value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>();
}

void collect_line(const json& line, double x, std::map<std::string, MetricSeries>& series) {
  for (const auto& [key, value] : line.items()) {
    if (kReservedKeys.count(key) == 0) collect_metric(value, key, x, series);
  }
}

}  // namespace

std::map<std::string, MetricSeries> read_metric_series(const std::string& metrics_path) {
  std::ifstream in(metrics_path, std::ios::binary);
  if (!in) throw IoError("cannot open '" + metrics_path + "': " + std::strerror(errno));
  std::map<std::string, MetricSeries> series;
  // Optimizer steps by rollout, then by train/step: placed once all of a rollout's are known.
  std::map<double, std::map<double, json>> step_lines;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    const bool complete = !in.eof();  // getline stopped at a newline, not at the end
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json object;
    try {
      object = json::parse(line);
    } catch (const json::parse_error& error) {
      if (!complete) break;  // being written right now, or cut short by a crash
      throw FormatError(metrics_path + " line " + std::to_string(number) + ": not valid JSON (" +
                        error.what() + ")");
    }
    if (!object.is_object()) {
      throw FormatError(metrics_path + " line " + std::to_string(number) +
                        ": expected a JSON object of metrics, got " + object.type_name());
    }
    auto step = object.find("step");
    if (step == object.end() || !step->is_number()) {
      throw FormatError(metrics_path + " line " + std::to_string(number) +
                        ": no numeric \"step\" (every line needs the step its metrics belong to)");
    }
    const double rollout = step->get<double>();
    auto train_step = object.find("train/step");
    if (train_step != object.end() && train_step->is_number()) {
      const double optimizer_step = train_step->get<double>();
      step_lines[rollout][optimizer_step] = std::move(object);
    } else {
      collect_line(object, rollout, series);
    }
  }
  if (in.bad()) throw IoError("cannot read '" + metrics_path + "': " + std::strerror(errno));
  for (const auto& [rollout, lines] : step_lines) {
    size_t index = 0;
    for (const auto& [unused, step_line] : lines) {
      collect_line(step_line, rollout + static_cast<double>(index++) / lines.size(), series);
    }
  }
  return series;
}

SeriesSummary summarize(const MetricSeries& series) {
  SeriesSummary summary;
  for (const auto& [x, value] : series.points) {
    if (std::isnan(value)) continue;
    if (summary.finite++ == 0) {
      summary.first_x = x;
      summary.min = summary.max = value;
    }
    summary.last_x = x;
    summary.last = value;
    summary.min = std::min(summary.min, value);
    summary.max = std::max(summary.max, value);
  }
  return summary;
}

std::vector<double> ema_smoothed(const MetricSeries& series, double weight) {
  std::vector<double> smoothed;
  smoothed.reserve(series.points.size());
  double average = 0;
  double debias = 0;  // 1 - weight^n: the share of the average that is data, not the zero start
  for (const auto& [x, value] : series.points) {
    if (std::isnan(value)) {
      smoothed.push_back(value);
      continue;
    }
    average = weight * average + (1 - weight) * value;
    debias = weight * debias + (1 - weight);
    smoothed.push_back(average / debias);
  }
  return smoothed;
}

}  // namespace ooze::launcher
