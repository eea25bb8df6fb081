#include "launcher/plot_command.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "launcher/gnuplot_process.h"
#include "launcher/gnuplot_script.h"
#include "launcher/metric_series.h"

namespace ooze::launcher {
namespace {

namespace fs = std::filesystem;

const char* const kPlotUsage =
    "usage: ooze plot OUT [--out DIR] [--keys KEY,KEY,...] [--smoothing W]\n"
    "  draws OUT/metrics.jsonl into DIR (default OUT/plots): dashboard.png, a grid of the\n"
    "  curves that matter (reward, eval, loss, KL, entropy, response length, grad norm, time),\n"
    "  one <key>.png per metric that is not constant, and index.html showing them all\n"
    "  --keys       metric names or patterns with '*', comma-separated (rollout/raw_reward,\n"
    "               eval/*); default: every numeric metric\n"
    "  --smoothing  TensorBoard's EMA weight, 0 <= W < 1 (default 0.6; 0: raw values only)\n";

// Whether `text` matches `pattern`, where '*' stands for any run of characters.
bool matches(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0;
  size_t star = std::string::npos, resume = 0;  // the last '*' seen and where it restarts
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string::npos) {
      p = star + 1;  // let the '*' swallow one more character
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(list);
  while (std::getline(in, part, ',')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// train/pg_loss -> train_pg_loss; anything but letters, digits and ._-@ becomes '_'.
std::string file_stem(const std::string& key) {
  std::string stem = key;
  for (char& c : stem) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' &&
        c != '@') {
      c = '_';
    }
  }
  return stem;
}

std::string html_escaped(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    switch (c) {
      case '&':
        escaped += "&amp;";
        break;
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      case '"':
        escaped += "&quot;";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

std::string short_number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", value);
  return text;
}

// The metrics --keys names (all of them without --keys), each pattern matching at least one.
std::set<std::string> selected_keys(const std::vector<std::string>& patterns,
                                    const std::map<std::string, MetricSeries>& series,
                                    const std::string& metrics_path) {
  std::set<std::string> selected;
  for (const std::string& pattern : patterns) {
    size_t found = 0;
    for (const auto& [key, unused] : series) {
      if (matches(pattern, key)) {
        selected.insert(key);
        ++found;
      }
    }
    if (found == 0) {
      std::string known;
      for (const auto& [key, unused] : series) known += (known.empty() ? "" : ", ") + key;
      throw ConfigError("--keys: '" + pattern + "' matches no metric of " + metrics_path +
                        "; its metrics are: " + known);
    }
  }
  if (patterns.empty()) {
    for (const auto& [key, unused] : series) selected.insert(key);
  }
  return selected;
}

// A grid a little wider than tall: two columns for up to four panels, three beyond.
int dashboard_columns(size_t panels) { return panels <= 1 ? 1 : panels <= 4 ? 2 : 3; }

std::string index_html(const std::string& run_dir, const PlotReport& report,
                       const std::map<std::string, MetricSeries>& series) {
  std::string html = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ooze plots: " +
                     html_escaped(run_dir) + "</title></head>\n<body>\n<h1>" +
                     html_escaped(run_dir) + "</h1>\n";
  if (!report.dashboard_path.empty()) {
    std::string panels;
    for (const DashboardPanel& panel : report.dashboard_panels)
      panels += (panels.empty() ? "" : ", ") + panel.title;
    html += "<figure><img src=\"dashboard.png\" alt=\"dashboard\"><figcaption>dashboard, " +
            std::to_string(report.dashboard_panels.size()) + " panels: " + html_escaped(panels) +
            "</figcaption></figure>\n";
  }
  for (const WrittenPlot& plot : report.plots) {
    const SeriesSummary summary = summarize(series.at(plot.key));
    html += "<figure><img src=\"" + html_escaped(fs::path(plot.png_path).filename().string()) +
            "\" alt=\"" + html_escaped(plot.key) + "\"><figcaption>" + html_escaped(plot.key) +
            ": " + std::to_string(plot.points) + " points, last " + short_number(summary.last) +
            ", min " + short_number(summary.min) + ", max " + short_number(summary.max) +
            "</figcaption></figure>\n";
  }
  if (!report.constants.empty() || !report.without_values.empty()) {
    html += "<h2>Not drawn</h2>\n<ul>\n";
    for (const ConstantMetric& constant : report.constants) {
      html += "<li>" + html_escaped(constant.key) + ": constant: " + short_number(constant.value) +
              "</li>\n";
    }
    for (const std::string& key : report.without_values) {
      html += "<li>" + html_escaped(key) + ": no finite values</li>\n";
    }
    html += "</ul>\n";
  }
  return html + "</body></html>\n";
}

void check_run_dir(const std::string& run_dir, const std::string& metrics_path) {
  std::error_code error;
  if (!fs::exists(run_dir, error)) {
    throw ConfigError("run directory '" + run_dir +
                      "' does not exist; pass the output directory of a run (it holds "
                      "metrics.jsonl)");
  }
  if (!fs::is_directory(run_dir, error)) {
    throw ConfigError("'" + run_dir +
                      "' is not a directory; pass the output directory of a run (it holds "
                      "metrics.jsonl)");
  }
  if (!fs::exists(metrics_path, error)) {
    throw ConfigError("no metrics.jsonl in '" + run_dir +
                      "': is it the output directory of a run that has logged a step?");
  }
}

double parse_smoothing(const std::string& text) {
  size_t used = 0;
  double weight = -1;
  try {
    weight = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(weight >= 0 && weight < 1)) {
    throw ConfigError("--smoothing: expected a weight from 0 (no smoothing) to below 1, got '" +
                      text + "'\n" + kPlotUsage);
  }
  return weight;
}

}  // namespace

PlotReport plot_metrics(const PlotOptions& options) {
  const std::string metrics_path = (fs::path(options.run_dir) / "metrics.jsonl").string();
  check_run_dir(options.run_dir, metrics_path);
  const std::map<std::string, MetricSeries> series = read_metric_series(metrics_path);
  if (series.empty()) throw ConfigError(metrics_path + " holds no numeric metrics to plot");
  const std::set<std::string> selected = selected_keys(options.keys, series, metrics_path);

  const fs::path plots_dir =
      options.plots_dir.empty() ? fs::path(options.run_dir) / "plots" : fs::path(options.plots_dir);
  std::error_code error;
  fs::create_directories(plots_dir, error);
  if (error) {
    throw IoError("cannot create the plot directory '" + plots_dir.string() +
                  "': " + error.message());
  }
  // The script names its PNGs absolutely, so that it redraws them from any directory.
  const fs::path script_dir = fs::absolute(plots_dir);

  PlotReport report;
  std::map<std::string, MetricSeries> drawn;
  std::vector<PlotFigure> figures;
  std::set<std::string> stems;
  for (const std::string& key : selected) {
    const SeriesSummary summary = summarize(series.at(key));
    if (summary.finite == 0) {
      report.without_values.push_back(key);
      continue;
    }
    if (summary.constant()) {
      report.constants.push_back({key, summary.last});
      continue;
    }
    // Distinct keys may clean up to the same name (a/b and a_b): number the later ones.
    std::string stem = file_stem(key);
    for (int n = 2; stems.count(stem) != 0; ++n) stem = file_stem(key) + "_" + std::to_string(n);
    stems.insert(stem);
    drawn.emplace(key, series.at(key));
    report.plots.push_back({key, (plots_dir / (stem + ".png")).string(), summary.finite});
    figures.push_back({(script_dir / (stem + ".png")).string(),
                       "",
                       {{key, {key}}},
                       1,
                       options.width,
                       options.height});
  }

  std::vector<std::string> drawn_keys;
  for (const auto& [key, unused] : drawn) drawn_keys.push_back(key);
  report.dashboard_panels = dashboard_panels(drawn_keys);
  if (!report.dashboard_panels.empty()) {
    report.dashboard_path = (plots_dir / "dashboard.png").string();
    std::vector<PlotPanel> panels;
    for (const DashboardPanel& panel : report.dashboard_panels)
      panels.push_back({panel.title, panel.keys});
    figures.push_back({(script_dir / "dashboard.png").string(), options.run_dir, panels,
                       dashboard_columns(panels.size()), options.dashboard_panel_width,
                       options.dashboard_panel_height});
  }

  if (!figures.empty()) {
    report.script_path = (plots_dir / "plots.gp").string();
    write_file_atomically(report.script_path, gnuplot_script(drawn, figures, options.smoothing));
    run_gnuplot(options.gnuplot, report.script_path);
  }
  std::vector<std::string> pngs;
  for (const WrittenPlot& plot : report.plots) pngs.push_back(plot.png_path);
  if (!report.dashboard_path.empty()) pngs.push_back(report.dashboard_path);
  for (const std::string& png : pngs) {
    if (fs::file_size(png, error) == 0 || error) {
      throw Error("gnuplot exited cleanly but wrote no '" + png + "'");
    }
  }
  report.index_path = (plots_dir / "index.html").string();
  write_file_atomically(report.index_path, index_html(options.run_dir, report, series));
  return report;
}

int run_plot_command(const std::vector<std::string>& args, std::ostream& out) {
  PlotOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      out << kPlotUsage;
      return 0;
    }
    if (arg == "--out" || arg == "--keys" || arg == "--smoothing") {
      if (i + 1 >= args.size()) throw ConfigError(arg + " needs a value\n" + kPlotUsage);
      const std::string& value = args[++i];
      if (arg == "--out") {
        options.plots_dir = value;
      } else if (arg == "--smoothing") {
        options.smoothing = parse_smoothing(value);
      } else {
        options.keys = split_commas(value);
        if (options.keys.empty())
          throw ConfigError("--keys needs at least one name\n" + std::string(kPlotUsage));
      }
    } else if (!arg.empty() && arg[0] == '-') {
      throw ConfigError("unknown flag '" + arg + "'\n" + kPlotUsage);
    } else if (options.run_dir.empty()) {
      options.run_dir = arg;
    } else {
      throw ConfigError("one run directory only, got '" + options.run_dir + "' and '" + arg +
                        "'\n" + kPlotUsage);
    }
  }
  if (options.run_dir.empty())
    throw ConfigError("which run? pass its output directory\n" + std::string(kPlotUsage));
  const PlotReport report = plot_metrics(options);
  const auto list = [&](const std::string& what, const std::vector<std::string>& items) {
    if (items.empty()) return;
    out << what;
    for (size_t i = 0; i < items.size(); ++i) out << (i == 0 ? " " : ", ") << items[i];
    out << "\n";
  };
  std::vector<std::string> panels, constants;
  for (const DashboardPanel& panel : report.dashboard_panels) panels.push_back(panel.title);
  for (const ConstantMetric& constant : report.constants)
    constants.push_back(constant.key + " = " + short_number(constant.value));
  if (!report.dashboard_path.empty()) {
    list("dashboard: " + report.dashboard_path + ", " + std::to_string(panels.size()) + " panels:",
         panels);
  }
  list("constant, not drawn:", constants);
  list("no finite values, not drawn:", report.without_values);
  out << report.plots.size() << " plots; index: " << report.index_path << "\n";
  return 0;
}

}  // namespace ooze::launcher
