// gnuplot's side of `ooze plot`: one script that holds the curves (as datablocks) and draws
// every PNG from them, kept beside the PNGs so that `gnuplot DIR/plots.gp` redraws them after
// an edit (size, colours, ranges).
//
// How the curves are drawn, as in TensorBoard: the smoothed line (ema_smoothed) bold, the raw
// values faint behind it; a curve of fewer than kMinPointsToSmooth points is drawn as it is,
// with a marker on each point. The x axis is the rollout, shared by every plot, with ticks at
// whole rollouts only; y ticks get just enough digits that neighbouring labels differ.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "launcher/metric_series.h"

namespace ooze::launcher {

// Fewer points than this are not smoothed: an average of two or three evals hides them.
constexpr size_t kMinPointsToSmooth = 10;

// Tick marks of an axis: one every `step`, labelled with the printf `format`.
struct AxisTicks {
  double step = 1;
  std::string format = "%g";
};

// For rollouts from `low` to `high`: a whole step (1, 2, 5, 10, 20, ...), at most about 8
// ticks, labels without decimals.
AxisTicks whole_number_ticks(double low, double high);

// For values from `low` to `high`: about 6 ticks (1, 2 or 5 times a power of ten apart), with
// as many decimals as the step needs, so that neighbouring labels differ however small the
// range; %e for values under 1e-3 or labels of more than 12 digits.
// Counts (every value whole) get whole steps, without decimals.
AxisTicks value_ticks(double low, double high, bool whole_values = false);

struct PlotPanel {
  std::string title;
  std::vector<std::string> keys;  // one line each, with a legend when there are several
};

// One PNG: a single panel, or a grid of them (the dashboard) under a title.
struct PlotFigure {
  std::string png_path;
  std::string title;  // above the grid; empty: none
  std::vector<PlotPanel> panels;
  int columns = 1;
  int panel_width = 800;  // pixels; the PNG is columns x rows panels
  int panel_height = 500;
};

// The script drawing `figures` from `series`, which must hold every key the panels name, each
// with a finite value. The x range spans all of `series`. `smoothing` is the EMA weight.
std::string gnuplot_script(const std::map<std::string, MetricSeries>& series,
                           const std::vector<PlotFigure>& figures, double smoothing);

}  // namespace ooze::launcher
