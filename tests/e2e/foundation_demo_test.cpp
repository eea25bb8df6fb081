// `ooze demo` as a user runs it: real rank processes, files on disk, errors on bad flags.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "tests/support/process.h"

namespace ooze {
namespace {

using std::chrono::milliseconds;

struct DemoRun {
  testing::ExitStatus status;
  std::string output;
  std::string dir;
};

DemoRun run_demo(const std::vector<std::string>& flags) {
  DemoRun run;
  run.dir = testing::make_temp_dir("demo");
  std::vector<std::string> argv = {testing::build_path("launcher/ooze"),
                                   "demo",
                                   "--output-dir",
                                   run.dir + "/out",
                                   "--distributed-timeout-minutes",
                                   "0.5"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  testing::Process proc(argv, {}, run.dir + "/log.txt");
  run.status = proc.wait(milliseconds(120000));
  run.output = proc.output();
  return run;
}

std::vector<nlohmann::json> read_metrics(const std::string& dir) {
  std::ifstream in(dir + "/out/metrics.jsonl");
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(FoundationDemo, TrainsSavesCheckpointsAndWritesMetricsAndConfig) {
  DemoRun run = run_demo({"--num-steps", "12", "--save-interval", "5", "--world-size", "2"});
  ASSERT_TRUE(run.status.exited && run.status.code == 0) << run.status.describe() << run.output;

  auto metrics = read_metrics(run.dir);
  ASSERT_EQ(metrics.size(), 12u);
  for (size_t i = 0; i < metrics.size(); ++i) {
    EXPECT_EQ(metrics[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
    EXPECT_TRUE(metrics[i].contains("wall_time"));
    EXPECT_TRUE(metrics[i]["loss"].is_number());
  }
  EXPECT_LT(metrics.back()["loss"].get<double>(), metrics.front()["loss"].get<double>());

  std::ifstream config_file(run.dir + "/out/config.json");
  auto config = nlohmann::json::parse(config_file);
  EXPECT_EQ(config["num_steps"].get<int64_t>(), 12);
  EXPECT_EQ(config["save_interval"].get<int64_t>(), 5);

  for (const char* iter : {"iter_0000005", "iter_0000010", "iter_0000012"}) {
    auto checkpoint = ShardedSafetensors::open(run.dir + "/out/checkpoints/" + iter);
    EXPECT_EQ(checkpoint.names(), (std::vector<std::string>{"bias", "weight"})) << iter;
    EXPECT_EQ(checkpoint.tensor("weight").numel(), 16) << iter;
  }
  EXPECT_NE(run.output.find("replicas identical"), std::string::npos) << run.output;
}

// Gradients are reduced as sums over the global batch, so the loss curve must not depend on
// how the batch is split over ranks and micro-batches (up to float32 rounding).
TEST(FoundationDemo, LossCurveDoesNotDependOnRanksOrMicroBatches) {
  DemoRun one = run_demo({"--num-steps", "8", "--world-size", "1", "--micro-batch-size", "64"});
  DemoRun two = run_demo({"--num-steps", "8", "--world-size", "2", "--micro-batch-size", "8"});
  DemoRun four = run_demo({"--num-steps", "8", "--world-size", "4", "--micro-batch-size", "4"});
  for (const DemoRun* run : {&one, &two, &four}) {
    ASSERT_TRUE(run->status.exited && run->status.code == 0) << run->output;
  }
  auto a = read_metrics(one.dir), b = read_metrics(two.dir), c = read_metrics(four.dir);
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  ASSERT_EQ(c.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) {
    double la = a[i]["loss"].get<double>();
    EXPECT_NEAR(b[i]["loss"].get<double>(), la, 1e-5 * std::max(1.0, la)) << "step " << i + 1;
    EXPECT_NEAR(c[i]["loss"].get<double>(), la, 1e-5 * std::max(1.0, la)) << "step " << i + 1;
  }
}

TEST(FoundationDemo, BadFlagsAreRejectedBeforeAnythingStarts) {
  DemoRun typo = run_demo({"--global-batch-sise", "64"});
  EXPECT_TRUE(typo.status.exited && typo.status.code == 1) << typo.status.describe();
  EXPECT_NE(typo.output.find("did you mean '--global-batch-size'"), std::string::npos)
      << typo.output;

  DemoRun uneven = run_demo({"--global-batch-size", "63", "--world-size", "2"});
  EXPECT_TRUE(uneven.status.exited && uneven.status.code == 1);
  EXPECT_NE(uneven.output.find("global_batch_size = 63"), std::string::npos) << uneven.output;
  std::ifstream metrics(uneven.dir + "/out/metrics.jsonl");
  EXPECT_FALSE(metrics.good()) << "nothing may run on a rejected config";
}

}  // namespace
}  // namespace ooze
