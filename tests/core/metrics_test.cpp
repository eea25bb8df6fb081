#include "core/metrics.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/timer.h"
#include "tests/support/process.h"

namespace ooze {
namespace metrics_test {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(MetricsSinkTest, WritesOneObjectPerLineWithStepAndTimes) {
  std::string path = testing::make_temp_dir("metrics") + "/logs/metrics.jsonl";
  double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  {
    MetricsSink sink(path);  // creates logs/
    sink.log(1, {{"loss", 0.5}, {"lr", 0.05}});
    sink.log(2, nlohmann::json{{"loss", 0.25}, {"phase", "train"}, {"extra", {{"a", 1}}}});
  }
  std::vector<nlohmann::json> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["step"], 1);
  EXPECT_DOUBLE_EQ(lines[0]["loss"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(lines[0]["lr"].get<double>(), 0.05);
  EXPECT_GE(lines[0]["wall_time"].get<double>(), before - 1);
  EXPECT_LT(lines[0]["wall_time"].get<double>(), before + 60);
  EXPECT_GE(lines[0]["elapsed"].get<double>(), 0.0);
  EXPECT_LE(lines[0]["elapsed"].get<double>(), lines[1]["elapsed"].get<double>());
  EXPECT_EQ(lines[1]["step"], 2);
  EXPECT_EQ(lines[1]["phase"], "train");
  EXPECT_EQ(lines[1]["extra"]["a"], 1);

  // Every line starts with step, wall_time, elapsed.
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first.rfind("{\"step\":1,\"wall_time\":", 0), 0u) << first;
}

TEST(MetricsSinkTest, EachLineIsOnDiskBeforeTheSinkCloses) {
  std::string path = testing::make_temp_dir("metrics") + "/metrics.jsonl";
  MetricsSink sink(path);
  sink.log(7, {{"loss", 1.0}});
  std::vector<nlohmann::json> lines = read_lines(path);  // sink still open
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["step"], 7);
}

TEST(MetricsSinkTest, AppendsToAnExistingFile) {
  std::string path = testing::make_temp_dir("metrics") + "/metrics.jsonl";
  MetricsSink(path).log(1, {{"loss", 1.0}});
  MetricsSink(path).log(2, {{"loss", 2.0}});
  std::vector<nlohmann::json> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["step"], 1);
  EXPECT_EQ(lines[1]["step"], 2);
}

// A run resumed at step 2 drops the lines of steps 2 and later (they are recorded again) and a
// last line a crash cut short, keeps the earlier ones byte for byte, and appends after them.
TEST(MetricsSinkTest, DroppingStepsFromAResumePointKeepsEachStepOnce) {
  std::string path = testing::make_temp_dir("metrics") + "/metrics.jsonl";
  {
    MetricsSink sink(path);
    for (int64_t step : {0, 1, 1, 2, 3}) sink.log(step, {{"loss", static_cast<double>(step)}});
  }
  std::ifstream whole(path);
  std::string before_two, line;
  for (int i = 0; i < 3 && std::getline(whole, line); ++i) before_two += line + "\n";
  whole.close();
  std::ofstream(path, std::ios::app) << "{\"step\":1,\"wall_ti";  // cut short by a crash

  MetricsSink resumed(path);
  EXPECT_EQ(resumed.drop_steps_from(2), 3);  // steps 2 and 3, and the torn line
  std::ifstream after(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(after), {}), before_two);
  resumed.log(2, {{"loss", 20.0}});
  resumed.sync();
  std::vector<nlohmann::json> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3]["step"], 2);
  EXPECT_DOUBLE_EQ(lines[3]["loss"].get<double>(), 20.0);
  EXPECT_EQ(resumed.drop_steps_from(3), 0);  // nothing of step 3 or later
}

TEST(MetricsSinkTest, NonFiniteValuesAreNull) {
  std::string path = testing::make_temp_dir("metrics") + "/metrics.jsonl";
  {
    MetricsSink sink(path);
    sink.log(
        1, {{"nan", std::nan("")}, {"inf", std::numeric_limits<double>::infinity()}, {"ok", 1.5}});
    sink.log(2, nlohmann::json{{"nested", {{"inf", -std::numeric_limits<double>::infinity()}}}});
  }
  std::vector<nlohmann::json> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines[0]["nan"].is_null());
  EXPECT_TRUE(lines[0]["inf"].is_null());
  EXPECT_EQ(lines[0]["ok"], 1.5);
  EXPECT_TRUE(lines[1]["nested"]["inf"].is_null());
}

TEST(MetricsSinkTest, RejectsReservedNamesAndNonObjects) {
  std::string path = testing::make_temp_dir("metrics") + "/metrics.jsonl";
  MetricsSink sink(path);
  try {
    sink.log(1, {{"step", 3.0}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'step' is reserved"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sink.log(1, nlohmann::json::array({1, 2})), Error);
}

TEST(MetricsSinkTest, UnopenableFileIsAnIoError) {
  std::string dir = testing::make_temp_dir("metrics");
  EXPECT_THROW(MetricsSink sink(dir), IoError);  // a directory, not a file
}

TEST(MetricsSinkTest, ConcurrentWritersProduceWholeLines) {
  std::string path = testing::make_temp_dir("metrics") + "/metrics.jsonl";
  constexpr int kThreads = 4, kLines = 200;
  {
    MetricsSink sink(path);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&sink, t] {
        for (int i = 0; i < kLines; ++i) {
          sink.log(i, {{"thread", t}, {"padding_to_make_lines_long", 1234567.891}});
        }
      });
    }
    for (auto& thread : threads) thread.join();
  }
  std::vector<nlohmann::json> lines = read_lines(path);  // parse fails on a torn line
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  std::vector<int> per_thread(kThreads, 0);
  for (const auto& line : lines) per_thread[line["thread"].get<int>()]++;
  for (int count : per_thread) EXPECT_EQ(count, kLines);
}

TEST(TimerTest, ElapsedGrowsAndResets) {
  Timer timer;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  double first = timer.elapsed();
  EXPECT_GE(first, 0.015);
  timer.reset();
  EXPECT_LT(timer.elapsed(), first);
}

TEST(TimerTest, ScopedTimerAccumulatesByName) {
  std::map<std::string, double> times;
  for (int i = 0; i < 2; ++i) {
    ScopedTimer t(times, "time/forward");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  { ScopedTimer t(times, "time/backward"); }
  ASSERT_EQ(times.size(), 2u);
  EXPECT_GE(times["time/forward"], 0.018);
  EXPECT_GE(times["time/backward"], 0.0);
  EXPECT_LT(times["time/backward"], times["time/forward"]);
}

}  // namespace metrics_test
}  // namespace ooze
