// `ooze train` with a Python reward that raises in the middle of a run: the driver stops with
// the hook, the sample and the Python traceback, the last checkpoint is whole, and the run
// resumes from it with a reward that works. The hook is tests/python/hooks/rewards.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/launcher/tiny_train_command.h"
#include "tests/support/expect_error.h"

namespace ooze::launcher {
namespace python_hook_train_test {

using ::ooze::testing::checkpointing_train_command;
using ::ooze::testing::Process;
using ::ooze::testing::read_file;
using namespace std::chrono_literals;

const std::string kRewards = std::string(OOZE_TEST_HOOKS_DIR) + "/rewards.py:";

TEST(PythonHookTrainTest, ARaisingRewardStopsTheRunAndItsLastCheckpointResumes) {
  if (!std::filesystem::exists(::ooze::testing::ooze_binary())) GTEST_SKIP() << "no ooze binary";
  const std::string dir = ::ooze::testing::make_temp_dir("python-reward-train");
  Process run(
      checkpointing_train_command(
          dir, {"--custom-rm-path", kRewards + "fails_in_fourth_rollout", "--num-rollout", "6"}),
      {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(120s);
  EXPECT_TRUE(status.exited && status.code == 1) << status.describe() << "\n" << run.output();
  const std::string output = run.output();
  EXPECT_CONTAINS(output, "--custom-rm-path " + kRewards +
                              "fails_in_fourth_rollout raised on sample 12 (group 6):\n");
  EXPECT_CONTAINS(output, "rewards.py\", line");
  EXPECT_CONTAINS(output, "RuntimeError: the judge crashed on sample 12");

  // Rollouts 0, 1 and 2 were trained and saved; the checkpoint is whole and resumes.
  const int64_t iteration = ::ooze::testing::expect_last_checkpoint_whole(dir + "/save");
  EXPECT_EQ(iteration, 3);
  Process resumed(checkpointing_train_command(
                      dir, {"--custom-rm-path", kRewards + "token_f1", "--load", dir + "/save",
                            "--save", dir + "/save-resumed", "--num-rollout", "4"}),
                  {{"OMP_NUM_THREADS", "1"}}, dir + "/resume-log.txt");
  const ::ooze::testing::ExitStatus resumed_status = resumed.wait(120s);
  EXPECT_TRUE(resumed_status.exited && resumed_status.code == 0)
      << resumed_status.describe() << "\n"
      << resumed.output();
  EXPECT_CONTAINS(resumed.output(), "resumed from " + dir + "/save at iteration 3");
}

}  // namespace python_hook_train_test
}  // namespace ooze::launcher
