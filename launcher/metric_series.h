// A run's metrics as curves: what `ooze plot` reads from OUT/metrics.jsonl (core/metrics.h: one
// JSON object per line with "step", "wall_time", "elapsed" and the metrics) before drawing.
//
// The x axis is the rollout: "step" is the rollout id on every line `ooze train` writes. An
// optimizer step's line (it holds "train/step") is also logged at its rollout's id; when a
// rollout takes several steps they are spread evenly over [rollout, rollout + 1) in train/step
// order, so no step is lost and every curve shares the rollout axis.
//
// Metrics: every key with a numeric value on some line except step, wall_time, elapsed and
// train/step. Nested objects are flattened with '/' ({"eval": {"gsm8k": 0.5}} is eval/gsm8k,
// Slime's own spelling). Booleans, strings and arrays are not metrics. null, which MetricsSink
// writes for NaN and Inf, breaks the curve there. A point logged twice (a resumed run repeating
// rollouts or optimizer steps) keeps its later value. A last line without its newline is
// skipped when it is not valid JSON: the run is still writing it, or died mid-line; any other
// malformed line is an error naming its number.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace ooze::launcher {

// One metric's curve: value by x (the rollout), NaN where the value was null (a gap).
struct MetricSeries {
  std::string key;
  std::map<double, double> points;
};

// Every numeric metric of a metrics.jsonl file, by key. Throws IoError when it cannot be read
// and FormatError naming the line for malformed content.
std::map<std::string, MetricSeries> read_metric_series(const std::string& metrics_path);

// A curve's finite values at a glance.
struct SeriesSummary {
  size_t finite = 0;  // values that are not NaN
  double first_x = 0, last_x = 0;
  double last = 0, min = 0, max = 0;
  // Every finite value equal (or just one): a flat line says nothing a number cannot.
  bool constant() const { return finite > 0 && min == max; }
};
SeriesSummary summarize(const MetricSeries& series);

// TensorBoard's smoothing: an exponential moving average over the points in x order,
// smoothed = weight * previous + (1 - weight) * value, divided by (1 - weight^n) after n finite
// values so that the start is not pulled towards zero. One value per point; NaN stays NaN and
// leaves the average alone. weight 0 returns the values unchanged.
std::vector<double> ema_smoothed(const MetricSeries& series, double weight);

}  // namespace ooze::launcher
