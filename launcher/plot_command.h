// `ooze plot`: PNG curves of a run's metrics, drawn by gnuplot, to look at a run without
// TensorBoard.
//
//   ooze plot OUT [--out DIR] [--keys KEY,KEY,...] [--smoothing W]
//
// Reads OUT/metrics.jsonl (launcher/metric_series.h) and writes, in DIR (default OUT/plots):
//   - dashboard.png: a grid of the curves a run is judged by (reward, eval, loss, KL, entropy,
//     response length, grad norm, time split; launcher/dashboard_panels.h), those it logged;
//   - <name>.png for each metric against the rollout, where <name> is the key with '/' and
//     other characters unsafe in file names replaced by '_' (train/pg_loss -> train_pg_loss.png);
//   - index.html: the dashboard, then every plot with its metric's last, minimum and maximum,
//     then the metrics not drawn: constants (every finite value equal, "constant: VALUE") and
//     those that are always null;
//   - plots.gp: the gnuplot script with the data, to redraw after an edit.
// Curves are smoothed as TensorBoard smooths them (launcher/gnuplot_script.h), the raw values
// faint behind; --smoothing W sets the weight (0 <= W < 1; 0: raw values only).
//
// --keys narrows the metrics to names or patterns in which '*' matches any characters
// (--keys 'rollout/raw_reward,eval/*,perf/*_time'); the dashboard shows those it can.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "core/config.h"
#include "launcher/dashboard_panels.h"

namespace ooze::launcher {

struct PlotOptions {
  std::string run_dir;            // OUT: the run's output directory, holding metrics.jsonl
  std::string plots_dir;          // where the PNGs go; empty: OUT/plots
  std::vector<std::string> keys;  // names or '*' patterns; empty: every metric
  double smoothing = 0.6;         // EMA weight, TensorBoard's default
  int width = 800;                // pixels of each metric's PNG
  int height = 500;
  int dashboard_panel_width = 600;  // pixels of each dashboard panel
  int dashboard_panel_height = 375;
  std::string gnuplot = "gnuplot";  // the program, looked up on PATH unless it holds a '/'
};

struct WrittenPlot {
  std::string key;
  std::string png_path;
  size_t points = 0;  // finite values drawn
};

struct ConstantMetric {
  std::string key;
  double value = 0;
};

struct PlotReport {
  std::string dashboard_path;  // DIR/dashboard.png; empty when no panel has a metric to draw
  std::vector<DashboardPanel> dashboard_panels;
  std::vector<WrittenPlot> plots;           // in key order
  std::vector<ConstantMetric> constants;    // selected metrics with one value throughout
  std::vector<std::string> without_values;  // selected metrics whose every value is null
  std::string index_path;                   // DIR/index.html
  std::string script_path;                  // DIR/plots.gp; empty when nothing was drawn
};

// Draws the selected metrics and writes the index. Throws ConfigError for a missing run
// directory or metrics file, no metrics, or a key pattern that matches nothing; Error when
// gnuplot is missing (install it with scripts/install-deps.sh) or fails (with what it printed).
PlotReport plot_metrics(const PlotOptions& options);

// Its flags (OUT, the run directory, is its one argument).
const ConfigSchema& plot_schema();

// `args` are the arguments after "plot"; prints where the plots went. Returns the exit code.
int run_plot_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace ooze::launcher
