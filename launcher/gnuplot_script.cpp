#include "launcher/gnuplot_script.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace ooze::launcher {
namespace {

// Curves with at most this many points get a marker on each: few points, each one matters.
constexpr size_t kMaxPointsWithMarkers = 50;

// Matplotlib's (and TensorBoard's) default colours, one per line of a panel.
const char* const kLineColors[] = {"1f77b4", "ff7f0e", "2ca02c", "d62728", "9467bd",
                                   "8c564b", "e377c2", "7f7f7f", "bcbd22", "17becf"};
// The raw values behind a smoothed line: the same colour, mostly transparent (#AARRGGBB with
// AA the transparency).
const char* const kFaintAlpha = "b0";

// A gnuplot string literal: single quotes, in which only a doubled quote is special.
std::string gnuplot_quoted(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted + "'";
}

std::string printf_string(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

// Data: the shortest text that reads back as the same double (0.1324, not
// 0.13240000000000002). Settings (ranges, steps): readable.
std::string full_precision(double value) {
  char text[32];
  const std::to_chars_result written = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, written.ptr);
}
std::string setting(double value) { return printf_string("%.15g", value); }

// 1, 2 or 5 times a power of ten, the smallest of them at least `wanted`.
double round_step(double wanted) {
  if (!(wanted > 0) || !std::isfinite(wanted)) return 1;
  const double power = std::pow(10.0, std::floor(std::log10(wanted)));
  for (double factor : {1.0, 2.0, 5.0}) {
    if (factor * power >= wanted * (1 - 1e-9)) return factor * power;
  }
  return 10 * power;
}

// floor(log10(value)), safe from 0.1 being just under a power of ten.
int decimal_exponent(double value) {
  return static_cast<int>(std::floor(std::log10(value) + 1e-9));
}

// The legend of a line in a panel of several: the key without its group (perf/, train/, ...),
// and the "_time" every phase time ends with.
std::string legend_label(const std::string& key) {
  std::string label = key.substr(key.find('/') + 1);
  const std::string time = "_time";
  if (key.rfind("perf/", 0) == 0 && label.size() > time.size() &&
      label.compare(label.size() - time.size(), time.size(), time) == 0) {
    label.resize(label.size() - time.size());
  }
  return label;
}

// Rows "x raw smoothed"; a blank line where the value was null, which breaks the curve.
std::string datablock(const std::string& name, const MetricSeries& series, double smoothing) {
  const std::vector<double> smoothed = ema_smoothed(series, smoothing);
  std::string block = "# " + series.key + "\n" + name + " << EOD\n";
  size_t index = 0;
  for (const auto& [x, value] : series.points) {
    const double average = smoothed[index++];
    block += std::isnan(value) ? "\n"
                               : full_precision(x) + " " + full_precision(value) + " " +
                                     full_precision(average) + "\n";
  }
  return block + "EOD\n";
}

class ScriptWriter {
 public:
  ScriptWriter(const std::map<std::string, MetricSeries>& series, double smoothing)
      : series_(series), smoothing_(smoothing) {}

  std::string write(const std::vector<PlotFigure>& figures) {
    script_ =
        "# Written by `ooze plot`: the curves of a run and the PNGs drawn from them. Run\n"
        "# `gnuplot` on this file to draw them again (after changing sizes, colours, ranges).\n"
        "ooze_png = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? 'pngcairo' : 'png'\n";
    for (const auto& [key, metric] : series_) {
      datablocks_[key] = "$m" + std::to_string(datablocks_.size() + 1);
      summaries_[key] = summarize(metric);
      script_ += datablock(datablocks_[key], metric, smoothing_);
    }
    write_x_axis();
    for (const PlotFigure& figure : figures) write_figure(figure);
    return script_;
  }

 private:
  // Every figure shares the run's rollouts as its x range, a little wider so that the first
  // and last points stand clear of the frame.
  void write_x_axis() {
    double low = 0, high = 0;
    bool first = true;
    for (const auto& [key, summary] : summaries_) {
      if (summary.finite == 0) continue;
      low = first ? summary.first_x : std::min(low, summary.first_x);
      high = first ? summary.last_x : std::max(high, summary.last_x);
      first = false;
    }
    const double span = std::max(high - low, 1.0);
    const double margin = 0.02 * span;
    const AxisTicks ticks = whole_number_ticks(low, high);
    script_ += "set grid\nset xrange [" + setting(low - margin) + ":" +
               setting(low + span + margin) + "]\nset xtics " + setting(ticks.step) +
               "\nset format x " + gnuplot_quoted(ticks.format) + "\n";
  }

  void write_figure(const PlotFigure& figure) {
    const int columns = std::max(figure.columns, 1);
    const int rows = (static_cast<int>(figure.panels.size()) + columns - 1) / columns;
    const bool grid = figure.panels.size() > 1 || !figure.title.empty();
    script_ += "\n# " + figure.png_path + "\nset terminal @ooze_png size " +
               std::to_string(columns * figure.panel_width) + "," +
               std::to_string(rows * figure.panel_height) + " noenhanced\nset output " +
               gnuplot_quoted(figure.png_path) + "\n";
    if (grid) {
      script_ += "set multiplot layout " + std::to_string(rows) + "," + std::to_string(columns) +
                 " title " + gnuplot_quoted(figure.title) + "\n";
    }
    for (const PlotPanel& panel : figure.panels) write_panel(panel);
    if (grid) script_ += "unset multiplot\n";
    script_ += "unset output\n";
  }

  void write_panel(const PlotPanel& panel) {
    double low = 0, high = 0;
    bool whole_values = true;
    for (size_t i = 0; i < panel.keys.size(); ++i) {
      const SeriesSummary& summary = summaries_.at(panel.keys[i]);
      low = i == 0 ? summary.min : std::min(low, summary.min);
      high = i == 0 ? summary.max : std::max(high, summary.max);
      for (const auto& [x, value] : series_.at(panel.keys[i]).points)
        whole_values = whole_values && (std::isnan(value) || value == std::round(value));
    }
    const AxisTicks ticks = value_ticks(low, high, whole_values);
    script_ += "set title " + gnuplot_quoted(panel.title) + "\nset ytics " + setting(ticks.step) +
               "\nset format y " + gnuplot_quoted(ticks.format) + "\n";
    const bool legend = panel.keys.size() > 1;
    // Under the plot rather than in it, where a legend would cover the curves it names; in
    // place of the x label, which the panels around name.
    script_ += legend ? "set key below horizontal samplen 2\nunset xlabel\n"
                      : "unset key\nset xlabel 'rollout'\n";

    // Faint raw values first, so that every bold line is drawn over them.
    std::vector<std::string> faint, bold;
    for (size_t i = 0; i < panel.keys.size(); ++i) {
      const std::string& key = panel.keys[i];
      const std::string data = datablocks_.at(key);
      const std::string color = kLineColors[i % std::size(kLineColors)];
      const std::string title = legend ? " title " + gnuplot_quoted(legend_label(key)) : "";
      const size_t points = summaries_.at(key).finite;
      if (smoothing_ > 0 && points >= kMinPointsToSmooth) {
        faint.push_back(data + " using 1:2 with lines linewidth 1 linecolor rgb '#" + kFaintAlpha +
                        color + "' notitle");
        bold.push_back(data + " using 1:3 with lines linewidth 2 linecolor rgb '#" + color + "'" +
                       title);
      } else {
        const std::string style =
            points <= kMaxPointsWithMarkers ? "linespoints pointtype 7 pointsize 0.6" : "lines";
        bold.push_back(data + " using 1:2 with " + style + " linewidth 2 linecolor rgb '#" + color +
                       "'" + title);
      }
    }
    std::vector<std::string> lines = faint;
    lines.insert(lines.end(), bold.begin(), bold.end());
    std::string plot = "plot ";
    for (size_t i = 0; i < lines.size(); ++i) plot += (i == 0 ? "" : ", \\\n     ") + lines[i];
    script_ += plot + "\n";
  }

  const std::map<std::string, MetricSeries>& series_;
  const double smoothing_;
  std::map<std::string, std::string> datablocks_;  // by key: $m1, $m2, ...
  std::map<std::string, SeriesSummary> summaries_;
  std::string script_;
};

}  // namespace

AxisTicks whole_number_ticks(double low, double high) {
  return {std::max(1.0, round_step((high - low) / 8)), "%.0f"};
}

AxisTicks value_ticks(double low, double high, bool whole_values) {
  const double largest = std::max(std::fabs(low), std::fabs(high));
  const double span = high > low ? high - low : std::max(largest, 1.0);
  const double step = whole_values ? std::max(1.0, round_step(span / 6)) : round_step(span / 6);
  const int decimals = std::max(0, -decimal_exponent(step));
  // 0.3632815 or 1795873256.5 in full, but 1.5e-09 rather than 0.0000000015.
  const int whole_digits = largest >= 1 ? decimal_exponent(largest) + 1 : 1;
  if ((largest == 0 || largest >= 1e-3) && whole_digits + decimals <= 12)
    return {step, "%." + std::to_string(decimals) + "f"};
  // The digits from the largest value's down to the step's.
  const int digits = decimal_exponent(largest) - decimal_exponent(step) + 1;
  return {step, "%." + std::to_string(std::clamp(digits, 2, 15) - 1) + "e"};
}

std::string gnuplot_script(const std::map<std::string, MetricSeries>& series,
                           const std::vector<PlotFigure>& figures, double smoothing) {
  return ScriptWriter(series, smoothing).write(figures);
}

}  // namespace ooze::launcher
