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
#include "core/config.h"
#include "core/error.h"
#include "launcher/commands.h"
#include "launcher/gnuplot_process.h"
#include "launcher/gnuplot_script.h"
#include "launcher/metric_series.h"

namespace ooze::launcher {
namespace {

namespace fs = std::filesystem;

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

const ConfigSchema& plot_schema() {
  static const ConfigSchema schema = [] {
    ConfigSchema schema;
    schema.section("plot");
    schema.add_string("out", "", "Where the PNGs and index.html go; empty: OUT/plots.");
    schema.add_string_list("keys", {},
                           "Metric names or patterns with '*' (rollout/raw_reward,eval/*); "
                           "empty: every numeric metric.");
    schema.add_double("smoothing", 0.6,
                      "TensorBoard's EMA weight, 0 <= W < 1 (0: raw values only); the raw "
                      "values are drawn faint behind.");
    return schema;
  }();
  return schema;
}

int run_plot_command(const std::vector<std::string>& args, std::ostream& out) {
  // OUT is the one argument that is not a flag or a flag's value.
  std::vector<std::string> run_dirs, flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.empty() || arg[0] != '-') {
      run_dirs.push_back(arg);
      continue;
    }
    flags.push_back(arg);
    const FieldSpec* spec = plot_schema().find(arg.substr(arg.find_first_not_of('-')));
    const bool takes_value =
        spec != nullptr && spec->type != FieldType::kBool && arg.find('=') == std::string::npos;
    if (takes_value && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      flags.push_back(args[++i]);
    }
  }
  const std::optional<Config> config = load_config_from_command_line(plot_schema(), flags);
  if (!config) {
    out << command_help("plot");
    return 0;
  }
  const std::string usage = "\n" + find_command("plot")->usage;
  if (run_dirs.empty()) throw ConfigError("which run? pass its output directory" + usage);
  if (run_dirs.size() > 1) {
    throw ConfigError("one run directory only, got '" + run_dirs[0] + "' and '" + run_dirs[1] +
                      "'" + usage);
  }
  PlotOptions options;
  options.run_dir = run_dirs[0];
  options.plots_dir = config->get<std::string>("out");
  options.keys = config->get<std::vector<std::string>>("keys");
  const bool keys_given = config->source("keys") != ConfigSource::kDefault;
  options.keys.erase(std::remove(options.keys.begin(), options.keys.end(), ""), options.keys.end());
  if (keys_given && options.keys.empty())
    throw ConfigError("--keys needs at least one name" + usage);
  options.smoothing = config->get<double>("smoothing");
  if (!(options.smoothing >= 0 && options.smoothing < 1)) {
    throw ConfigError("--smoothing: expected a weight from 0 (no smoothing) to below 1, got " +
                      short_number(options.smoothing) + usage);
  }
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
