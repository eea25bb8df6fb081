// `ooze plot` on metrics written by the real MetricsSink and by hand: the PNGs gnuplot draws
// (signature, IHDR size), the index, which keys become plots, and the errors users meet.
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
  // Five steps as an RL run logs them: Slime's names, eval every fourth step (nested, as a
  // JSON object), and values that are not metrics.
  void log_run() {
    MetricsSink sink(run_ + "/metrics.jsonl");
    for (int step = 0; step < 5; ++step) {
      sink.log(step, {{"rollout/raw_reward", 0.1 * step},
                      {"train/pg_loss", 1.0 / (step + 1)},
                      {"train/grad_norm", 2.0 - 0.3 * step},
                      {"perf/train_time", 10.0 + step}});
      if (step % 4 == 0) {
        sink.log(step, json{{"eval", {{"gsm8k", 0.5 + 0.05 * step}}},
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
  EXPECT_EQ(files_in(plots), (std::set<std::string>{"eval_gsm8k.png", "perf_train_time.png",
                                                    "rollout_raw_reward.png", "train_grad_norm.png",
                                                    "train_pg_loss.png", "index.html"}));
  ASSERT_EQ(report.plots.size(), 5u);
  const std::vector<std::pair<std::string, size_t>> expected = {{"eval/gsm8k", 2},
                                                                {"perf/train_time", 5},
                                                                {"rollout/raw_reward", 5},
                                                                {"train/grad_norm", 5},
                                                                {"train/pg_loss", 5}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(report.plots[i].key, expected[i].first);
    EXPECT_EQ(report.plots[i].points, expected[i].second);
    expect_png(report.plots[i].png_path, 800, 500);
  }
  EXPECT_TRUE(report.without_values.empty());
  // Different data, different pictures.
  EXPECT_NE(read_file(plots + "/train_pg_loss.png"), read_file(plots + "/train_grad_norm.png"));

  EXPECT_EQ(report.index_path, plots + "/index.html");
  const std::string index = read_file(report.index_path);
  for (const auto& [key, points] : expected)
    EXPECT_CONTAINS(index, key + ": " + std::to_string(points) + " points");
  EXPECT_CONTAINS(index, "<img src=\"train_pg_loss.png\"");
  EXPECT_CONTAINS(index, "train/pg_loss: 5 points, last 0.2, min 0.2, max 1");
}

TEST_F(PlotCommandTest, KeysSelectByNameOrPatternAndOutChoosesTheDirectory) {
  require_gnuplot();
  log_run();
  std::ostringstream out;
  ASSERT_EQ(run_plot_command(
                {run_, "--keys", "rollout/raw_reward,perf/*_time", "--out", run_ + "/chosen"}, out),
            0);
  EXPECT_EQ(files_in(run_ + "/chosen"),
            (std::set<std::string>{"perf_train_time.png", "rollout_raw_reward.png", "index.html"}));
  EXPECT_FALSE(fs::exists(run_ + "/plots"));
  EXPECT_CONTAINS(out.str(),
                  run_ + "/chosen/rollout_raw_reward.png  (rollout/raw_reward, 5 points)");
  EXPECT_CONTAINS(out.str(), "2 plots; index: " + run_ + "/chosen/index.html");

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
  std::ofstream(run_ + "/metrics.jsonl") << "{\"step\": 0, \"a\": 1}\n";
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

}  // namespace plot_command_test
}  // namespace ooze::launcher
