// `ooze train --loss-type custom_loss` on the tiny model with two trainer ranks: the CISPO
// example, named by a path relative to the working directory, trains every step and logs its own
// metric; a loss that cannot load stops the command before any process starts; a loss that
// raises stops the run with its traceback, and no checkpoint is written.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/launcher/tiny_train_command.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze::launcher {
namespace python_loss_command_test {

using namespace std::chrono_literals;
using nlohmann::json;

const std::string kLosses = OOZE_TEST_LOSSES_DIR;
const std::string kExamples = OOZE_EXAMPLES_DIR;

std::string quoted(const std::string& text) { return "'" + text + "'"; }

struct CommandRun {
  ::ooze::testing::ExitStatus status;
  std::string output;
  std::string dir;
};

// The tiny train command with two trainer ranks and `flags` ({DIR}: the run's directory), run
// from `cwd`.
CommandRun train(const std::string& name, const std::string& cwd,
                 const std::vector<std::string>& flags) {
  CommandRun run;
  run.dir = ::ooze::testing::make_temp_dir("python-loss-command-" + name);
  std::vector<std::string> all = {"--actor-num-gpus-per-node", "2", "--loss-type", "custom_loss"};
  for (std::string flag : flags) {
    if (flag.rfind("{DIR}", 0) == 0) flag = run.dir + flag.substr(5);
    all.push_back(flag);
  }
  std::string command = "cd " + quoted(cwd) + " &&";
  for (const std::string& arg : ::ooze::testing::tiny_train_command(run.dir, all)) {
    command += " " + quoted(arg);
  }
  ::ooze::testing::Process process({"/bin/bash", "-c", command}, {{"OMP_NUM_THREADS", "1"}},
                                   run.dir + "/log.txt");
  run.status = process.wait(180s);
  run.output = process.output();
  return run;
}

TEST(PythonLossCommandTest, TheCispoExampleTrainsEveryStep) {
  const CommandRun run = train("cispo", kExamples + "/algorithms",
                               {"--custom-loss-function-path", "cispo_loss.py:cispo_loss"});
  ASSERT_TRUE(run.status.exited && run.status.code == 0) << run.status.describe() << "\n"
                                                         << run.output;
  int steps = 0;
  for (const json& line : ::ooze::testing::read_json_lines(run.dir + "/out/metrics.jsonl")) {
    if (!line.contains("train/step")) continue;
    ++steps;
    for (const char* key : {"train/loss", "train/pg_loss", "train/entropy_loss",
                            "train/is_ratio_mean", "train/grad_norm"}) {
      ASSERT_TRUE(line.contains(key)) << key << " missing from " << line.dump();
      EXPECT_TRUE(std::isfinite(line[key].get<double>())) << line.dump();
    }
    EXPECT_NEAR(line["train/is_ratio_mean"].get<double>(), 1.0, 0.1) << line.dump();
  }
  EXPECT_EQ(steps, 6);  // 3 rollouts of 8 samples, 4 a step
}

TEST(PythonLossCommandTest, ALossThatCannotLoadStopsTheCommandBeforeAnyProcess) {
  const CommandRun run =
      train("broken", kLosses, {"--custom-loss-function-path", "broken_import.py:loss"});
  EXPECT_TRUE(run.status.exited && run.status.code != 0) << run.status.describe();
  EXPECT_CONTAINS(run.output, "--custom-loss-function-path " + kLosses +
                                  "/broken_import.py:loss: importing it raised");
  EXPECT_CONTAINS(run.output, "broken_import.py\", line 5");
  EXPECT_EQ(run.output.find("actor runtime session"), std::string::npos) << run.output;
  EXPECT_FALSE(std::filesystem::exists(run.dir + "/out/metrics.jsonl"));
}

TEST(PythonLossCommandTest, ALossThatRaisesStopsTheRunWithItsTraceback) {
  const CommandRun run = train("raises", kLosses,
                               {"--custom-loss-function-path", "bad_losses.py:raises", "--save",
                                "{DIR}/save", "--save-interval", "1"});
  EXPECT_TRUE(run.status.exited && run.status.code != 0) << run.status.describe();
  EXPECT_CONTAINS(run.output, "bad_losses.py:raises raised on a micro-batch of");
  EXPECT_CONTAINS(run.output, "ValueError: no loss today");
  EXPECT_FALSE(std::filesystem::exists(run.dir + "/save/latest_checkpointed_iteration.txt"))
      << "a checkpoint was written";
}

}  // namespace python_loss_command_test
}  // namespace ooze::launcher
