// `ooze plot` on metrics written by the real MetricsSink and by hand: the PNGs gnuplot draws
// (signature, IHDR size), the dashboard, the index, which keys become plots, the script's axes,
// and the errors users meet.
#include "launcher/plot_command.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/metrics.h"
#include "launcher/metric_series.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze::launcher {
namespace plot_command_test {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;
using ::ooze::testing::error_message_of;

bool gnuplot_on_path() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path == nullptr ? "" : path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (!dir.empty() && ::access((fs::path(dir) / "gnuplot").c_str(), X_OK) == 0) return true;
  }
  return false;
}

PlotOptions options_for(const std::string& run_dir) {
  PlotOptions options;
  options.run_dir = run_dir;
  return options;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint32_t big_endian_u32(const std::string& bytes, size_t offset) {
  uint32_t value = 0;
  for (size_t i = 0; i < 4; ++i) value = (value << 8) | static_cast<uint8_t>(bytes[offset + i]);
  return value;
}

// A PNG of the given size: the signature, then the IHDR chunk (length 13) with width and
// height, and more than a blank image's worth of bytes.
void expect_png(const std::string& path, uint32_t width, uint32_t height) {
  SCOPED_TRACE(path);
  const std::string png = read_file(path);
  ASSERT_GT(png.size(), 3000u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(big_endian_u32(png, 8), 13u);
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(big_endian_u32(png, 16), width);
  EXPECT_EQ(big_endian_u32(png, 20), height);
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

class PlotCommandTest : public ::testing::Test {
 protected:
  void SetUp() override { run_ = ::ooze::testing::make_temp_dir("plot"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(run_);
  }
  void require_gnuplot() {
    if (!gnuplot_on_path()) GTEST_SKIP() << "gnuplot is not installed (scripts/install-deps.sh)";
  }
  // Five rollouts as an RL run logs them: Slime's names, two optimizer steps per rollout
  // (lines of their own with "train/step"), a constant, eval every fourth rollout (nested, as a
  // JSON object), and values that are not metrics.
  void log_run() {
    MetricsSink sink(run_ + "/metrics.jsonl");
    for (int rollout = 0; rollout < 5; ++rollout) {
      for (int step = 2 * rollout + 1; step <= 2 * rollout + 2; ++step) {
        sink.log(rollout, {{"train/pg_loss", 1.0 / step},
                           {"train/grad_norm", 2.0 - 0.1 * step},
                           {"train/step", step}});
      }
      sink.log(rollout, {{"rollout/raw_reward", 0.1 * rollout},
                         {"rollout/samples", 256},
                         {"perf/train_time", 10.0 + rollout}});
      if (rollout % 4 == 0) {
        sink.log(rollout, json{{"eval", {{"gsm8k", 0.5 + 0.05 * rollout}}},
                               {"note", "not a number"},
                               {"flag", true},
                               {"lengths", {1, 2, 3}}});
      }
    }
  }
  std::string run_;
};

TEST_F(PlotCommandTest, DrawsEveryMetricAndListsItInTheIndex) {
  require_gnuplot();
  log_run();
  const PlotReport report = plot_metrics(options_for(run_));
  const std::string plots = run_ + "/plots";
  EXPECT_EQ(files_in(plots),
            (std::set<std::string>{"dashboard.png", "eval_gsm8k.png", "perf_train_time.png",
                                   "rollout_raw_reward.png", "train_grad_norm.png",
                                   "train_pg_loss.png", "index.html", "plots.gp"}));
  ASSERT_EQ(report.plots.size(), 5u);
  const std::vector<std::pair<std::string, size_t>> expected = {{"eval/gsm8k", 2},
                                                                {"perf/train_time", 5},
                                                                {"rollout/raw_reward", 5},
                                                                {"train/grad_norm", 10},
                                                                {"train/pg_loss", 10}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(report.plots[i].key, expected[i].first);
    EXPECT_EQ(report.plots[i].points, expected[i].second);
    expect_png(report.plots[i].png_path, 800, 500);
  }
  EXPECT_TRUE(report.without_values.empty());
  ASSERT_EQ(report.constants.size(), 1u);
  EXPECT_EQ(report.constants[0].key, "rollout/samples");
  EXPECT_EQ(report.constants[0].value, 256);
  // Different data, different pictures.
  EXPECT_NE(read_file(plots + "/train_pg_loss.png"), read_file(plots + "/train_grad_norm.png"));

  // reward, eval, loss, grad norm and time: three panels of 600 x 375 a row, two rows.
  EXPECT_EQ(report.dashboard_path, plots + "/dashboard.png");
  std::vector<std::string> panels;
  for (const DashboardPanel& panel : report.dashboard_panels) panels.push_back(panel.title);
  EXPECT_EQ(panels, (std::vector<std::string>{"reward", "eval", "loss", "grad norm", "time (s)"}));
  expect_png(report.dashboard_path, 3 * 600, 2 * 375);

  EXPECT_EQ(report.index_path, plots + "/index.html");
  const std::string index = read_file(report.index_path);
  for (const auto& [key, points] : expected)
    EXPECT_CONTAINS(index, key + ": " + std::to_string(points) + " points");
  EXPECT_CONTAINS(index, "<img src=\"dashboard.png\"");
  EXPECT_CONTAINS(index, "dashboard, 5 panels: reward, eval, loss, grad norm, time (s)");
  EXPECT_CONTAINS(index, "<img src=\"train_pg_loss.png\"");
  EXPECT_CONTAINS(index, "train/pg_loss: 10 points, last 0.1, min 0.1, max 1");
  EXPECT_CONTAINS(index, "rollout/samples: constant: 256");
}

TEST_F(PlotCommandTest, KeysSelectByNameOrPatternAndOutChoosesTheDirectory) {
  require_gnuplot();
  log_run();
  std::ostringstream out;
  ASSERT_EQ(run_plot_command(
                {run_, "--keys", "rollout/raw_reward,perf/*_time", "--out", run_ + "/chosen"}, out),
            0);
  EXPECT_EQ(files_in(run_ + "/chosen"),
            (std::set<std::string>{"dashboard.png", "perf_train_time.png", "rollout_raw_reward.png",
                                   "index.html", "plots.gp"}));
  EXPECT_FALSE(fs::exists(run_ + "/plots"));
  EXPECT_CONTAINS(out.str(),
                  "dashboard: " + run_ + "/chosen/dashboard.png, 2 panels: reward, time (s)\n");
  EXPECT_CONTAINS(out.str(), "2 plots; index: " + run_ + "/chosen/index.html");
  expect_png(run_ + "/chosen/dashboard.png", 2 * 600, 375);

  PlotOptions options;
  options.run_dir = run_;
  options.keys = {"train/*"};
  options.width = 640;
  options.height = 360;
  const PlotReport report = plot_metrics(options);
  ASSERT_EQ(report.plots.size(), 2u);
  for (const WrittenPlot& plot : report.plots) expect_png(plot.png_path, 640, 360);
}

TEST_F(PlotCommandTest, ReadsNestedNullRepeatedAndUnfinishedLines) {
  const std::string path = run_ + "/metrics.jsonl";
  std::ofstream(path)
      << "{\"step\": 0, \"wall_time\": 1.0, \"a\": 1, \"eval\": {\"x\": {\"y\": 2}}}\n"
      << "\n"
      << "{\"step\": 1, \"a\": null, \"s\": \"text\"}\n"
      << "{\"step\": 2, \"a\": 3}\n"
      << "{\"step\": 1, \"a\": 5}\n"  // a resumed run repeats step 1
      << "{\"step\": 3, \"a\": 4";    // still being written
  const std::map<std::string, MetricSeries> series = read_metric_series(path);
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series.at("eval/x/y").points, (std::map<double, double>{{0, 2}}));
  EXPECT_EQ(series.at("a").points, (std::map<double, double>{{0, 1}, {1, 5}, {2, 3}}));

  std::ofstream(path) << "{\"step\": 0, \"a\": 1}\n{\"step\": 1, \"a\": null}\n";
  EXPECT_TRUE(std::isnan(read_metric_series(path).at("a").points.at(1)));
}

TEST_F(PlotCommandTest, OptimizerStepsShareTheirRolloutsStretchOfTheAxis) {
  const std::string path = run_ + "/metrics.jsonl";
  std::ofstream(path) << "{\"step\": 0, \"train/step\": 1, \"train/loss\": 4}\n"
                      << "{\"step\": 0, \"train/step\": 2, \"train/loss\": 3}\n"
                      << "{\"step\": 0, \"rollout/raw_reward\": 0.5}\n"
                      << "{\"step\": 1, \"train/step\": 3, \"train/loss\": 2}\n"
                      << "{\"step\": 1, \"train/step\": 4, \"train/loss\": 1}\n"
                      << "{\"step\": 1, \"train/step\": 5, \"train/loss\": 9}\n"
                      // resumed from the checkpoint after train step 3: steps 4 and 5 again
                      << "{\"step\": 1, \"train/step\": 4, \"train/loss\": 0.5}\n"
                      << "{\"step\": 1, \"train/step\": 5, \"train/loss\": 0.25}\n";
  const std::map<std::string, MetricSeries> series = read_metric_series(path);
  EXPECT_EQ(series.size(), 2u);  // train/step is the bookkeeping, not a metric
  const std::map<double, double> expected = {
      {0, 4}, {0.5, 3}, {1, 2}, {1 + 1.0 / 3, 0.5}, {1 + 2.0 / 3, 0.25}};
  EXPECT_EQ(series.at("train/loss").points, expected);
  EXPECT_EQ(series.at("rollout/raw_reward").points, (std::map<double, double>{{0, 0.5}}));
}

TEST_F(PlotCommandTest, MetricsWithoutFiniteValuesAreReportedNotDrawn) {
  require_gnuplot();
  std::ofstream(run_ + "/metrics.jsonl") << "{\"step\": 0, \"a\": 1, \"b\": null}\n"
                                         << "{\"step\": 1, \"a\": null, \"b\": null}\n"
                                         << "{\"step\": 2, \"a\": 2}\n";
  const PlotReport report = plot_metrics(options_for(run_));
  ASSERT_EQ(report.plots.size(), 1u);
  EXPECT_EQ(report.plots[0].key, "a");
  EXPECT_EQ(report.plots[0].points, 2u);
  expect_png(report.plots[0].png_path, 800, 500);
  EXPECT_EQ(report.without_values, std::vector<std::string>{"b"});
  EXPECT_CONTAINS(read_file(report.index_path), "b: no finite values");
}

TEST_F(PlotCommandTest, MalformedLinesAreErrorsNamingTheirNumber) {
  const std::string path = run_ + "/metrics.jsonl";
  std::ofstream(path) << "{\"step\": 0, \"a\": 1}\n\n{\"step\": 1, \"a\": \n{\"step\": 2}\n";
  std::string message = error_message_of<FormatError>([&] { read_metric_series(path); });
  EXPECT_CONTAINS(message, path + " line 3: not valid JSON");

  std::ofstream(path) << "{\"step\": 0, \"a\": 1}\n[1, 2]\n";
  message = error_message_of<FormatError>([&] { plot_metrics(options_for(run_)); });
  EXPECT_CONTAINS(message, "line 2: expected a JSON object of metrics, got array");

  std::ofstream(path) << "{\"a\": 1}\n";
  message = error_message_of<FormatError>([&] { read_metric_series(path); });
  EXPECT_CONTAINS(message, "line 1: no numeric \"step\"");
}

TEST_F(PlotCommandTest, ErrorsSayWhatIsMissingAndWhatToDo) {
  std::ostringstream out;
  std::string message =
      error_message_of<ConfigError>([&] { run_plot_command({run_ + "/nope"}, out); });
  EXPECT_CONTAINS(message, "run directory '" + run_ + "/nope' does not exist");

  message = error_message_of<ConfigError>([&] { run_plot_command({run_}, out); });
  EXPECT_CONTAINS(message, "no metrics.jsonl in '" + run_ + "'");

  std::ofstream(run_ + "/metrics.jsonl") << "{\"step\": 0, \"s\": \"x\"}\n";
  message = error_message_of<ConfigError>([&] { run_plot_command({run_}, out); });
  EXPECT_CONTAINS(message, "holds no numeric metrics");

  std::ofstream(run_ + "/metrics.jsonl") << "{\"step\": 0, \"train/pg_loss\": 1, \"eval/x\": 2}\n";
  message = error_message_of<ConfigError>([&] {
    run_plot_command({run_, "--keys", "train/pg_loss,rollout/*"}, out);
  });
  EXPECT_CONTAINS(message, "'rollout/*' matches no metric");
  EXPECT_CONTAINS(message, "its metrics are: eval/x, train/pg_loss");

  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { run_plot_command({}, out); }),
                  "pass its output directory");
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    run_plot_command({run_, "--bogus"}, out);
                  }),
                  "unknown flag '--bogus'");
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                    run_plot_command({run_, "--keys"}, out);
                  }),
                  "--keys: missing value");
  EXPECT_EQ(run_plot_command({"--help"}, out), 0);
  EXPECT_CONTAINS(out.str(), "usage: ooze plot OUT");
}

TEST_F(PlotCommandTest, AMissingOrFailingGnuplotIsExplained) {
  std::ofstream(run_ + "/metrics.jsonl") << "{\"step\": 0, \"a\": 1}\n{\"step\": 1, \"a\": 2}\n";
  PlotOptions options;
  options.run_dir = run_;
  options.gnuplot = "ooze-test-no-such-gnuplot";
  std::string message = error_message_of<Error>([&] { plot_metrics(options); });
  EXPECT_CONTAINS(message, "cannot find 'ooze-test-no-such-gnuplot' on PATH");
  EXPECT_CONTAINS(message, "scripts/install-deps.sh");

  // A stand-in that complains the way gnuplot does and exits with an error.
  options.gnuplot = run_ + "/failing-gnuplot";
  std::ofstream(options.gnuplot) << "#!/bin/sh\ncat >/dev/null\n"
                                 << "echo '\"-\" line 1: unknown or ambiguous terminal' >&2\n"
                                 << "exit 3\n";
  ASSERT_EQ(::chmod(options.gnuplot.c_str(), 0755), 0);
  message = error_message_of<Error>([&] { plot_metrics(options); });
  EXPECT_CONTAINS(message, "gnuplot failed (exit status 3)");
  EXPECT_CONTAINS(message, "unknown or ambiguous terminal");

  // One that exits cleanly without drawing anything.
  options.gnuplot = "true";
  message = error_message_of<Error>([&] { plot_metrics(options); });
  EXPECT_CONTAINS(message, "wrote no '" + run_ + "/plots/a.png'");
}

TEST_F(PlotCommandTest, TheOozeBinaryRunsIt) {
  require_gnuplot();
  const std::string ooze = ::ooze::testing::ooze_binary();
  if (!fs::exists(ooze)) GTEST_SKIP() << ooze << " not built";
  log_run();
  ::ooze::testing::Process plot({ooze, "plot", run_, "--keys", "eval/*"}, {}, run_ + "/log.txt");
  ::ooze::testing::ExitStatus status = plot.wait(60s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << plot.output();
  EXPECT_CONTAINS(plot.output(), "1 plots; index: " + run_ + "/plots/index.html");
  expect_png(run_ + "/plots/eval_gsm8k.png", 800, 500);

  ::ooze::testing::Process missing({ooze, "plot", run_ + "/nope"}, {}, run_ + "/missing.txt");
  status = missing.wait(60s);
  EXPECT_TRUE(status.exited && status.code == 1) << status.describe();
  EXPECT_CONTAINS(missing.output(), "ooze plot: run directory '" + run_ + "/nope' does not exist");
}

// A GRPO run with a KL loss as `ooze train` logs it: per rollout two optimizer steps and a
// rollout line, eval every `eval_interval` rollouts, some metrics constant throughout.
void log_grpo_run(const std::string& run_dir, int rollouts, int eval_interval) {
  MetricsSink sink(run_dir + "/metrics.jsonl");
  int step = 0;
  for (int rollout = 0; rollout < rollouts; ++rollout) {
    if (rollout % eval_interval == 0) {
      sink.log(rollout, {{"eval/add", 0.3 + 0.01 * rollout},
                         {"eval/add/truncated_ratio", 0.0},
                         {"perf/eval_time", 0.2 + 0.01 * std::sin(rollout)}});
    }
    for (int k = 0; k < 2; ++k) {
      ++step;
      sink.log(rollout, {{"train/pg_loss", 0.01 * std::cos(step)},
                         {"train/ppo_kl", 0.001 * std::sin(step)},
                         {"train/kl_loss", 0.02 + 0.01 * std::sin(0.3 * step)},
                         {"train/entropy_loss", 0.7 - 0.004 * step},
                         {"train/grad_norm", 1.5 + std::sin(1.7 * step)},
                         {"train/lr", 5e-4},
                         {"train/step", step}});
    }
    sink.log(rollout, {{"rollout/raw_reward", 0.3 + 0.01 * rollout + 0.05 * std::sin(rollout)},
                       {"rollout/response_len/mean", 2.4 + 0.1 * std::cos(rollout)},
                       {"rollout/samples", 256},
                       {"rollout/groups", 16},
                       {"perf/rollout_time", 0.1 + 0.02 * std::sin(rollout)},
                       {"perf/train_time", 0.4 + 0.05 * std::cos(rollout)},
                       {"perf/step_time", 0.6 + 0.05 * std::cos(rollout)}});
  }
}

// `ooze plot RUN ARGS...` by the built binary; its output.
std::string run_ooze_plot(const std::string& run_dir, std::vector<std::string> args) {
  args.insert(args.begin(), {::ooze::testing::ooze_binary(), "plot", run_dir});
  ::ooze::testing::Process plot(args, {}, run_dir + "/plot-log.txt");
  const ::ooze::testing::ExitStatus status = plot.wait(60s);
  EXPECT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << plot.output();
  return plot.output();
}

TEST_F(PlotCommandTest, TheDashboardOfAnRlRunDrawsWhatMattersAndNoConstants) {
  require_gnuplot();
  if (!fs::exists(::ooze::testing::ooze_binary())) GTEST_SKIP() << "ooze not built";
  log_grpo_run(run_, 30, 10);
  const std::string output = run_ooze_plot(run_, {});
  const std::string plots = run_ + "/plots";
  EXPECT_CONTAINS(output, "dashboard: " + plots +
                              "/dashboard.png, 8 panels: reward, eval, loss, KL, entropy, "
                              "response length, grad norm, time (s)\n");
  expect_png(plots + "/dashboard.png", 3 * 600, 3 * 375);
  EXPECT_CONTAINS(output,
                  "constant, not drawn: eval/add/truncated_ratio = 0, rollout/groups = 16, "
                  "rollout/samples = 256, train/lr = 0.0005\n");
  const std::set<std::string> files = files_in(plots);
  for (const char* constant : {"eval_add_truncated_ratio.png", "rollout_groups.png",
                               "rollout_samples.png", "train_lr.png"}) {
    EXPECT_EQ(files.count(constant), 0u) << constant;
  }
  EXPECT_EQ(files.count("train_ppo_kl.png"), 1u);
  EXPECT_CONTAINS(read_file(plots + "/index.html"), "train/lr: constant: 0.0005");

  // 30 rollouts: ticks every 5; the 60 optimizer steps smoothed over their raw values, the
  // three evals drawn as they are, with markers.
  const std::string script = read_file(plots + "/plots.gp");
  EXPECT_CONTAINS(script, "\nset xtics 5\nset format x '%.0f'\n");
  EXPECT_CONTAINS(script, "using 1:2 with lines linewidth 1");  // raw, faint
  EXPECT_CONTAINS(script, "using 1:3 with lines linewidth 2");  // smoothed
  EXPECT_CONTAINS(script, "using 1:2 with linespoints");        // eval/add's 3 points
}

TEST_F(PlotCommandTest, AShortRunHasWholeRolloutTicks) {
  require_gnuplot();
  if (!fs::exists(::ooze::testing::ooze_binary())) GTEST_SKIP() << "ooze not built";
  log_grpo_run(run_, 2, 10);
  const std::string output = run_ooze_plot(run_, {});
  // One eval is a constant: 7 panels, three rows.
  EXPECT_CONTAINS(output, "7 panels: reward, loss, KL, entropy, response length, grad norm");
  expect_png(run_ + "/plots/dashboard.png", 3 * 600, 3 * 375);

  const std::string script = read_file(run_ + "/plots/plots.gp");
  std::istringstream lines(script);
  std::vector<std::string> x_settings;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("set xtics", 0) == 0 || line.rfind("set format x", 0) == 0 ||
        line.rfind("set xrange", 0) == 0)
      x_settings.push_back(line);
  }
  // Rollouts 0 and 1, their optimizer steps up to 1.5: a tick at each whole rollout only.
  EXPECT_EQ(x_settings, (std::vector<std::string>{"set xrange [-0.03:1.53]", "set xtics 1",
                                                  "set format x '%.0f'"}));
  EXPECT_EQ(script.find("using 1:3"), std::string::npos) << "too few points to smooth";
}

TEST_F(PlotCommandTest, SmoothingIsAnOption) {
  require_gnuplot();
  log_grpo_run(run_, 12, 100);
  std::ostringstream out;
  ASSERT_EQ(run_plot_command({run_, "--smoothing", "0"}, out), 0);
  const std::string raw = read_file(run_ + "/plots/plots.gp");
  EXPECT_EQ(raw.find("using 1:3"), std::string::npos);
  EXPECT_CONTAINS(raw, "$m1 using 1:2 with linespoints");
  ASSERT_EQ(run_plot_command({run_, "--smoothing", "0.9"}, out), 0);
  EXPECT_CONTAINS(read_file(run_ + "/plots/plots.gp"), "using 1:3");

  for (const std::string& bad : std::vector<std::string>{"1", "-0.1"}) {
    EXPECT_CONTAINS(error_message_of<ConfigError>([&] {
                      run_plot_command({run_, "--smoothing", bad}, out);
                    }),
                    "--smoothing: expected a weight from 0 (no smoothing) to below 1, got " + bad);
  }
  for (const std::string& bad : std::vector<std::string>{"0.6x", "strong"}) {
    const std::string message = error_message_of<ConfigError>([&] {
      run_plot_command({run_, "--smoothing", bad}, out);
    });
    EXPECT_CONTAINS(message, "--smoothing");
    EXPECT_CONTAINS(message, bad);
  }
}

}  // namespace plot_command_test
}  // namespace ooze::launcher
