// How `ooze plot` draws, without gnuplot: the smoothing, the axis ticks and the dashboard's
// choice of panels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "launcher/dashboard_panels.h"
#include "launcher/gnuplot_script.h"
#include "launcher/metric_series.h"

namespace ooze::launcher {
namespace plot_drawing_test {

MetricSeries series_of(const std::vector<double>& values) {
  MetricSeries series;
  series.key = "m";
  for (size_t i = 0; i < values.size(); ++i) series.points[static_cast<double>(i)] = values[i];
  return series;
}

TEST(PlotDrawingTest, SmoothingIsTensorBoardsDebiasedMovingAverage) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> smoothed = ema_smoothed(series_of({1, 2, nan, 3}), 0.6);
  ASSERT_EQ(smoothed.size(), 4u);
  // Debiased, the first value is itself rather than 0.4 of it.
  EXPECT_DOUBLE_EQ(smoothed[0], 1);
  EXPECT_DOUBLE_EQ(smoothed[1], (0.6 * 0.4 * 1 + 0.4 * 2) / (1 - 0.6 * 0.6));
  EXPECT_TRUE(std::isnan(smoothed[2]));  // a gap stays a gap and leaves the average alone
  EXPECT_DOUBLE_EQ(smoothed[3],
                   (0.6 * 0.6 * 0.4 * 1 + 0.6 * 0.4 * 2 + 0.4 * 3) / (1 - 0.6 * 0.6 * 0.6));

  EXPECT_EQ(ema_smoothed(series_of({3, -1, 7}), 0), (std::vector<double>{3, -1, 7}));
}

// The labels gnuplot prints for ticks every `ticks.step` from below `low` to above `high`.
std::vector<std::string> tick_labels(const AxisTicks& ticks, double low, double high) {
  std::vector<std::string> labels;
  for (double tick = std::floor(low / ticks.step); tick <= std::ceil(high / ticks.step); ++tick) {
    char text[64];
    std::snprintf(text, sizeof(text), ticks.format.c_str(), tick * ticks.step);
    labels.push_back(text);
  }
  return labels;
}

TEST(PlotDrawingTest, ValueTicksHaveDistinctLabelsOnAnyRange) {
  const std::vector<std::pair<double, double>> ranges = {
      {0.36328125, 0.3632814},  // a reward that barely moves: %g would print 0.363281 each time
      {-1.5e-8, 4e-8},          // a loss that is zero but for rounding
      {0, 1},
      {2.3, 2.6},
      {7000, 7000.05},
      {1795873256.5, 1795873257.6},  // a clock's worth of digits
      {-3, 250000},
  };
  for (const auto& [low, high] : ranges) {
    SCOPED_TRACE(std::to_string(low) + " .. " + std::to_string(high));
    const AxisTicks ticks = value_ticks(low, high);
    const std::vector<std::string> labels = tick_labels(ticks, low, high);
    EXPECT_GE(labels.size(), 4u);
    EXPECT_LE(labels.size(), 9u);
    EXPECT_EQ(std::set<std::string>(labels.begin(), labels.end()).size(), labels.size())
        << ticks.format << " step " << ticks.step;
  }
  EXPECT_EQ(value_ticks(0.36328125, 0.3632814).format, "%.8f");
  EXPECT_EQ(value_ticks(0, 1).format, "%.1f");
  EXPECT_EQ(value_ticks(-1.5e-8, 4e-8).format, "%.1e");

  // A count, such as rollout/max_staleness going from 0 to 1: no tick at 0.2.
  const AxisTicks count = value_ticks(0, 1, /*whole_values=*/true);
  EXPECT_EQ(count.step, 1);
  EXPECT_EQ(count.format, "%.0f");
  EXPECT_EQ(value_ticks(0, 600, true).step, 100);
}

TEST(PlotDrawingTest, RolloutTicksAreWholeNumbers) {
  for (const auto& [low, high] : std::vector<std::pair<double, double>>{
           {0, 1}, {0, 1.5}, {0, 3}, {0, 7}, {5, 12}, {0, 100}, {0, 799.5}, {0, 12345}}) {
    SCOPED_TRACE(std::to_string(low) + " .. " + std::to_string(high));
    const AxisTicks ticks = whole_number_ticks(low, high);
    EXPECT_GE(ticks.step, 1);
    EXPECT_EQ(ticks.step, std::round(ticks.step));
    EXPECT_EQ(ticks.format, "%.0f");
    EXPECT_LE((high - low) / ticks.step, 8.01);
  }
  EXPECT_EQ(whole_number_ticks(0, 1).step, 1);
  EXPECT_EQ(whole_number_ticks(0, 100).step, 20);
}

TEST(PlotDrawingTest, TheDashboardShowsThePanelsWhoseMetricsItHas) {
  const std::vector<std::string> grpo = {"eval/add",
                                         "eval/add/pass@4",
                                         "eval/add/response_len/mean",
                                         "perf/rollout_time",
                                         "perf/rollout_tokens_per_sec",
                                         "perf/train_time",
                                         "rollout/raw_reward",
                                         "rollout/reward",
                                         "rollout/response_len/mean",
                                         "train/entropy_loss",
                                         "train/grad_norm",
                                         "train/kl_loss",
                                         "train/loss",
                                         "train/pg_loss",
                                         "train/ppo_kl"};
  const std::vector<DashboardPanel> panels = dashboard_panels(grpo);
  std::vector<std::pair<std::string, std::vector<std::string>>> shown;
  for (const DashboardPanel& panel : panels) shown.push_back({panel.title, panel.keys});
  EXPECT_EQ(shown, (std::vector<std::pair<std::string, std::vector<std::string>>>{
                       {"reward", {"rollout/raw_reward"}},
                       {"eval", {"eval/add", "eval/add/pass@4"}},
                       {"loss", {"train/pg_loss"}},
                       {"KL", {"train/ppo_kl", "train/kl_loss"}},
                       {"entropy", {"train/entropy_loss"}},
                       {"response length", {"rollout/response_len/mean"}},
                       {"grad norm", {"train/grad_norm"}},
                       {"time (s)", {"perf/rollout_time", "perf/train_time"}}}));

  // An sft run: its loss under the name it logs, and no panel for what it lacks.
  const std::vector<DashboardPanel> sft =
      dashboard_panels({"perf/train_time", "train/grad_norm", "train/loss"});
  ASSERT_EQ(sft.size(), 3u);
  EXPECT_EQ(sft[0].title, "loss");
  EXPECT_EQ(sft[0].keys, std::vector<std::string>{"train/loss"});
  EXPECT_EQ(sft[1].title, "grad norm");
  EXPECT_EQ(sft[2].title, "time (s)");
  EXPECT_TRUE(dashboard_panels({"a", "b"}).empty());
}

}  // namespace plot_drawing_test
}  // namespace ooze::launcher
