// `ooze plot`: PNG curves of a run's metrics, drawn by gnuplot, to look at a run without
// TensorBoard.
//
//   ooze plot OUT [--out DIR] [--keys KEY,KEY,...]
//
// Reads OUT/metrics.jsonl (core/metrics.h: one JSON object per line with "step", "wall_time",
// "elapsed" and the metrics) and draws each selected metric against step into DIR/<name>.png,
// where <name> is the key with '/' and other characters unsafe in file names replaced by '_'
// (train/pg_loss -> train_pg_loss.png). DIR defaults to OUT/plots; DIR/index.html shows all the
// plots with each metric's last, minimum and maximum value.
//
// Metrics: every key with a numeric value on some line except step, wall_time and elapsed;
// --keys narrows them to names or patterns in which '*' matches any characters
// (--keys 'rollout/raw_reward,eval/*,perf/*_time'). Nested objects are flattened with '/'
// ({"eval": {"gsm8k": 0.5}} is eval/gsm8k, Slime's own spelling). Booleans, strings and arrays
// are not metrics. null, which MetricsSink writes for NaN and Inf, breaks the curve there. A
// step logged twice (a resumed run repeating steps) keeps its later value. A last line without
// its newline is skipped when it is not valid JSON: the run is still writing it, or died
// mid-line; any other malformed line is an error naming its number.
#pragma once

#include <cstddef>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "core/config.h"

namespace ooze {
namespace launcher {

struct PlotOptions {
  std::string run_dir;            // OUT: the run's output directory, holding metrics.jsonl
  std::string plots_dir;          // where the PNGs go; empty: OUT/plots
  std::vector<std::string> keys;  // names or '*' patterns; empty: every metric
  int width = 800;                // pixels of each PNG
  int height = 500;
  std::string gnuplot = "gnuplot";  // the program, looked up on PATH unless it holds a '/'
};

// One metric's curve: value by step, NaN where the value was null (a gap in the curve).
struct MetricSeries {
  std::string key;
  std::map<double, double> points;
};

struct WrittenPlot {
  std::string key;
  std::string png_path;
  size_t points = 0;  // finite values drawn
};

struct PlotReport {
  std::vector<WrittenPlot> plots;           // in key order
  std::vector<std::string> without_values;  // selected metrics whose every value is null
  std::string index_path;                   // DIR/index.html
};

// Every numeric metric of a metrics.jsonl file, by key. Throws IoError when it cannot be read
// and FormatError naming the line for malformed content.
std::map<std::string, MetricSeries> read_metric_series(const std::string& metrics_path);

// Draws the selected metrics and writes the index. Throws ConfigError for a missing run
// directory or metrics file, no metrics, or a key pattern that matches nothing; Error when
// gnuplot is missing (install it with scripts/install-deps.sh) or fails (with what it printed).
PlotReport plot_metrics(const PlotOptions& options);

// Its flags (OUT, the run directory, is its one argument).
const ConfigSchema& plot_schema();

// `args` are the arguments after "plot"; prints where the plots went. Returns the exit code.
int run_plot_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace launcher
}  // namespace ooze
