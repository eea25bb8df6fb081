#include "launcher/plot_command.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/config.h"
#include "core/error.h"
#include "launcher/commands.h"

extern char** environ;

namespace ooze::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Written by MetricsSink on every line; the x axis or bookkeeping, not metrics.
const std::set<std::string> kReservedKeys = {"step", "wall_time", "elapsed"};

// Adds the numbers under `value` (flattening objects with '/') to their series at `step`.
void collect(const json& value, const std::string& key, double step,
             std::map<std::string, MetricSeries>& series) {
  if (value.is_object()) {
    for (const auto& [name, inner] : value.items()) {
      collect(inner, key.empty() ? name : key + "/" + name, step, series);
    }
    return;
  }
  if (!value.is_number() && !value.is_null()) return;
  MetricSeries& metric = series[key];
  metric.key = key;
  metric.points[step] =
      value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>();
}

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

// A gnuplot string literal: single quotes, in which only a doubled quote is special.
std::string gnuplot_quoted(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted + "'";
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

// A private directory for gnuplot's script and data, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "ooze-gnuplot-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw IoError("cannot create a temporary directory for gnuplot's data under '" +
                    fs::temp_directory_path().string() + "': " + std::strerror(errno));
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs gnuplot with `script_path` as its standard input; its output goes to `log_path`.
void run_gnuplot(const std::string& program, const std::string& script_path,
                 const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, script_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> argv = {const_cast<char*>(program.c_str()), nullptr};
  pid_t pid = -1;
  const int spawned =
      ::posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned == ENOENT) {
    throw Error("cannot find '" + program +
                "' on PATH: ooze plot draws with gnuplot; install it with scripts/install-deps.sh "
                "(Debian package gnuplot-nox)");
  }
  if (spawned != 0) {
    throw Error("cannot start '" + program + "': " + std::strerror(spawned));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw Error("waiting for gnuplot failed: " + std::string(std::strerror(errno)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status));
  std::string output = read_text_file(log_path);
  if (output.size() > 4000) output = "..." + output.substr(output.size() - 4000);
  throw Error("gnuplot failed (" + how + "); it printed:\n" + output);
}

// One PNG per series: pngcairo (antialiased) where this gnuplot has it, else the libgd png.
std::string gnuplot_script(const PlotOptions& options, const std::vector<std::string>& keys,
                           const std::vector<std::string>& data_paths,
                           const std::vector<std::string>& png_paths) {
  const std::string size = std::to_string(options.width) + "," + std::to_string(options.height);
  std::string script =
      "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
      "  set terminal pngcairo size " +
      size +
      " noenhanced\n"
      "} else {\n"
      "  set terminal png size " +
      size +
      " noenhanced\n"
      "}\n"
      "set grid\n"
      "set key off\n"
      "set xlabel 'step'\n";
  for (size_t i = 0; i < keys.size(); ++i) {
    script += "set output " + gnuplot_quoted(png_paths[i]) + "\n";
    script += "set title " + gnuplot_quoted(keys[i]) + "\n";
    script += "plot " + gnuplot_quoted(data_paths[i]) +
              " using 1:2 with linespoints linewidth 1.5 pointtype 7 pointsize 0.5\n";
  }
  return script + "unset output\n";
}

// Data rows "step value"; a blank line where the value was null, which breaks the curve.
std::string gnuplot_data(const MetricSeries& series) {
  std::string data;
  char row[64];
  for (const auto& [step, value] : series.points) {
    if (std::isnan(value)) {
      data += "\n";
      continue;
    }
    std::snprintf(row, sizeof(row), "%.17g %.17g\n", step, value);
    data += row;
  }
  return data;
}

std::string index_html(const std::string& run_dir, const std::vector<WrittenPlot>& plots,
                       const std::map<std::string, MetricSeries>& series,
                       const std::vector<std::string>& without_values) {
  std::string html = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ooze plots: " +
                     html_escaped(run_dir) + "</title></head>\n<body>\n<h1>" +
                     html_escaped(run_dir) + "</h1>\n";
  for (const WrittenPlot& plot : plots) {
    double last = 0, low = std::numeric_limits<double>::infinity(), high = -low;
    for (const auto& [step, value] : series.at(plot.key).points) {
      if (std::isnan(value)) continue;
      last = value;
      low = std::min(low, value);
      high = std::max(high, value);
    }
    html += "<figure><img src=\"" + html_escaped(fs::path(plot.png_path).filename().string()) +
            "\" alt=\"" + html_escaped(plot.key) + "\"><figcaption>" + html_escaped(plot.key) +
            ": " + std::to_string(plot.points) + " points, last " + short_number(last) + ", min " +
            short_number(low) + ", max " + short_number(high) + "</figcaption></figure>\n";
  }
  for (const std::string& key : without_values) {
    html += "<p>" + html_escaped(key) + ": no finite values, not plotted</p>\n";
  }
  return html + "</body></html>\n";
}

}  // namespace

std::map<std::string, MetricSeries> read_metric_series(const std::string& metrics_path) {
  std::ifstream in(metrics_path, std::ios::binary);
  if (!in) throw IoError("cannot open '" + metrics_path + "': " + std::strerror(errno));
  std::map<std::string, MetricSeries> series;
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
    for (const auto& [key, value] : object.items()) {
      if (kReservedKeys.count(key) == 0) collect(value, key, step->get<double>(), series);
    }
  }
  if (in.bad()) throw IoError("cannot read '" + metrics_path + "': " + std::strerror(errno));
  return series;
}

PlotReport plot_metrics(const PlotOptions& options) {
  std::error_code error;
  if (!fs::exists(options.run_dir, error)) {
    throw ConfigError("run directory '" + options.run_dir +
                      "' does not exist; pass the output directory of a run (it holds "
                      "metrics.jsonl)");
  }
  if (!fs::is_directory(options.run_dir, error)) {
    throw ConfigError("'" + options.run_dir +
                      "' is not a directory; pass the output directory of a run (it holds "
                      "metrics.jsonl)");
  }
  const std::string metrics_path = (fs::path(options.run_dir) / "metrics.jsonl").string();
  if (!fs::exists(metrics_path, error)) {
    throw ConfigError("no metrics.jsonl in '" + options.run_dir +
                      "': is it the output directory of a run that has logged a step?");
  }
  const std::map<std::string, MetricSeries> series = read_metric_series(metrics_path);
  if (series.empty()) throw ConfigError(metrics_path + " holds no numeric metrics to plot");

  std::set<std::string> selected;
  for (const std::string& pattern : options.keys) {
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
  if (options.keys.empty()) {
    for (const auto& [key, unused] : series) selected.insert(key);
  }

  PlotReport report;
  const fs::path plots_dir =
      options.plots_dir.empty() ? fs::path(options.run_dir) / "plots" : fs::path(options.plots_dir);
  fs::create_directories(plots_dir, error);
  if (error) {
    throw IoError("cannot create the plot directory '" + plots_dir.string() +
                  "': " + error.message());
  }
  ScratchDir scratch;
  std::vector<std::string> keys, data_paths, png_paths;
  std::set<std::string> stems;
  for (const std::string& key : selected) {
    const MetricSeries& metric = series.at(key);
    size_t finite = 0;
    for (const auto& [step, value] : metric.points) finite += std::isnan(value) ? 0 : 1;
    if (finite == 0) {
      report.without_values.push_back(key);
      continue;
    }
    // Distinct keys may clean up to the same name (a/b and a_b): number the later ones.
    std::string stem = file_stem(key);
    for (int n = 2; stems.count(stem) != 0; ++n) stem = file_stem(key) + "_" + std::to_string(n);
    stems.insert(stem);
    keys.push_back(key);
    data_paths.push_back(scratch.file(std::to_string(keys.size()) + ".dat"));
    png_paths.push_back((plots_dir / (stem + ".png")).string());
    write_file_atomically(data_paths.back(), gnuplot_data(metric));
    report.plots.push_back({key, png_paths.back(), finite});
  }
  if (!keys.empty()) {
    const std::string script = scratch.file("plot.gp");
    write_file_atomically(script, gnuplot_script(options, keys, data_paths, png_paths));
    run_gnuplot(options.gnuplot, script, scratch.file("gnuplot.log"));
  }
  for (const WrittenPlot& plot : report.plots) {
    if (fs::file_size(plot.png_path, error) == 0 || error) {
      throw Error("gnuplot exited cleanly but wrote no '" + plot.png_path + "'");
    }
  }
  report.index_path = (plots_dir / "index.html").string();
  write_file_atomically(report.index_path,
                        index_html(options.run_dir, report.plots, series, report.without_values));
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
  const PlotReport report = plot_metrics(options);
  for (const WrittenPlot& plot : report.plots) {
    out << plot.png_path << "  (" << plot.key << ", " << plot.points << " points)\n";
  }
  for (const std::string& key : report.without_values) {
    out << "not plotted: " << key << " has no finite values\n";
  }
  out << report.plots.size() << " plots; index: " << report.index_path << "\n";
  return 0;
}

}  // namespace ooze::launcher
