// `ooze train` with a Python reward that raises in the middle of a run: the driver stops with
// the hook, the sample and the Python traceback, the last checkpoint is whole, and the run
// resumes from it with a reward that works. The hook is tests/python/hooks/rewards.py.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

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
  // The first of rollout 3's groups to finish (6 or 7, samples 12 to 15) names its sample.
  const std::regex named("--custom-rm-path " + kRewards +
                         "fails_in_fourth_rollout raised on sample (1[2-5]) \\(group [67]\\):\n"
                         "Traceback[^]*rewards\\.py\", line [0-9]+[^]*RuntimeError: the judge "
                         "crashed on sample (1[2-5])");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(output, match, named)) << output;
  EXPECT_EQ(match[1], match[2]);

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

TEST(PythonHookTrainTest, RolloutHooksSeeEachRolloutAndShapeWhatTrains) {
  if (!std::filesystem::exists(::ooze::testing::ooze_binary())) GTEST_SKIP() << "no ooze binary";
  const std::string hooks = std::string(OOZE_TEST_HOOKS_DIR) + "/rollout_hooks.py:";
  const std::string dir = ::ooze::testing::make_temp_dir("python-rollout-hooks");
  Process run(
      ::ooze::testing::tiny_train_command(
          dir, {"--num-rollout", "2", "--rollout-sample-filter-path", hooks + "remove_odd_samples",
                "--custom-reward-post-process-path", hooks + "zero_rewards",
                "--custom-rollout-log-function-path", hooks + "log_to_file",
                "--save-debug-rollout-data", dir + "/samples_{rollout_id}.jsonl"}),
      {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(120s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << run.output();

  // The log function saw every rollout's 8 samples and its metrics.
  const std::vector<nlohmann::json> logged =
      ::ooze::testing::read_json_lines(dir + "/out/python_rollout_log.jsonl");
  ASSERT_EQ(logged.size(), 2u);
  for (int64_t rollout = 0; rollout < 2; ++rollout) {
    EXPECT_EQ(logged[rollout]["rollout_id"], rollout);
    EXPECT_EQ(logged[rollout]["samples"], 8);
    EXPECT_EQ(logged[rollout]["indices"][0], 8 * rollout);
    EXPECT_GT(logged[rollout]["rollout_time"].get<double>(), 0);
  }
  // Rollout 1's log function returned True: its line keeps perf/*, not rollout/*.
  int64_t rollout_lines = 0;
  for (const nlohmann::json& line : ::ooze::testing::read_json_lines(dir + "/out/metrics.jsonl")) {
    if (!line.contains("perf/step_time")) {
      // A train step: advantages of 0 (the post-processed rewards) make the policy loss 0.
      if (line.contains("train/pg_loss")) {
        EXPECT_EQ(line["train/pg_loss"], 0.0) << line.dump();
      }
      continue;
    }
    const int64_t rollout = line["step"].get<int64_t>();
    EXPECT_EQ(line.contains("rollout/raw_reward"), rollout == 0) << line.dump();
    if (rollout == 0) {
      EXPECT_EQ(line["rollout/raw_reward"], logged[0]["raw_reward"]);
      EXPECT_EQ(line["rollout/removed_samples"], 4);
    }
    ++rollout_lines;
  }
  EXPECT_EQ(rollout_lines, 2);
  // The removed samples (odd indices) were kept with loss mask 0; the others train.
  for (int64_t rollout = 0; rollout < 2; ++rollout) {
    for (const nlohmann::json& sample :
         ::ooze::testing::read_json_lines(dir + "/samples_" + std::to_string(rollout) + ".jsonl")) {
      const auto mask = sample["loss_mask"].get<std::vector<int>>();
      const bool removed = sample["index"].get<int64_t>() % 2 == 1;
      for (int value : mask) EXPECT_EQ(value, removed ? 0 : 1) << sample.dump();
    }
  }
}

// The train data the trainer takes is the conversion's (its rewards reach the postprocess
// function), and the postprocess function's in-place changes are what trains: rollout 1's
// advantages are all 0, so its pg_loss is 0, while rollout 0's is not.
TEST(PythonHookTrainTest, TrainDataHooksMakeAndChangeWhatTrains) {
  if (!std::filesystem::exists(::ooze::testing::ooze_binary())) GTEST_SKIP() << "no ooze binary";
  const std::string hooks = std::string(OOZE_TEST_HOOKS_DIR) + "/train_data.py:";
  const std::string dir = ::ooze::testing::make_temp_dir("python-train-data-hooks");
  Process run(::ooze::testing::tiny_train_command(
                  dir, {"--num-rollout", "2", "--custom-convert-samples-to-train-data-path",
                        hooks + "logged_conversion", "--rollout-data-postprocess-path",
                        hooks + "zero_advantages_in_odd_rollouts"}),
              {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(120s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << run.output();

  const std::vector<nlohmann::json> converted =
      ::ooze::testing::read_json_lines(dir + "/out/converted.jsonl");
  const std::vector<nlohmann::json> postprocessed =
      ::ooze::testing::read_json_lines(dir + "/out/rollout_data.jsonl");
  ASSERT_EQ(converted.size(), 2u);
  ASSERT_EQ(postprocessed.size(), 2u);
  for (int64_t rollout = 0; rollout < 2; ++rollout) {
    EXPECT_EQ(converted[rollout]["samples"], 8);
    EXPECT_EQ(postprocessed[rollout]["rollout_id"], rollout);
    EXPECT_EQ(postprocessed[rollout]["rewards"], converted[rollout]["rewards"]);
    EXPECT_EQ(postprocessed[rollout]["keys"],
              nlohmann::json({"advantages", "log_probs", "loss_masks", "returns", "rewards",
                              "rollout_log_probs", "tokens"}));
  }
  int64_t steps = 0;
  for (const nlohmann::json& line : ::ooze::testing::read_json_lines(dir + "/out/metrics.jsonl")) {
    if (!line.contains("train/pg_loss")) continue;
    ++steps;
    const double pg_loss = line["train/pg_loss"].get<double>();
    if (line["step"] == 1) {
      EXPECT_EQ(pg_loss, 0.0) << line.dump();
    } else {
      EXPECT_NE(pg_loss, 0.0) << line.dump();
      EXPECT_TRUE(std::isfinite(line["train/grad_norm"].get<double>())) << line.dump();
    }
  }
  EXPECT_EQ(steps, 4);  // 2 rollouts of 8 samples, 4 a step
}

TEST(PythonHookTrainTest, ARolloutHookThatAnswersWronglyStopsTheRun) {
  if (!std::filesystem::exists(::ooze::testing::ooze_binary())) GTEST_SKIP() << "no ooze binary";
  const std::string hooks = std::string(OOZE_TEST_HOOKS_DIR) + "/rollout_hooks.py:";
  const std::string dir = ::ooze::testing::make_temp_dir("python-rollout-hooks-wrong");
  Process run(::ooze::testing::tiny_train_command(
                  dir, {"--num-rollout", "1", "--custom-reward-post-process-path",
                        hooks + "post_process_wrong_length"}),
              {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(120s);
  EXPECT_TRUE(status.exited && status.code == 1) << status.describe();
  EXPECT_CONTAINS(run.output(),
                  "post_process_wrong_length returned rewards [0.0]; expected "
                  "(raw_rewards, rewards), two lists of 8 numbers");
}

// A whole rollout in Python, prompts from a Python data source whose state checkpoints with the
// run, an evaluation by the same function with a Python eval log, and the run's router reached
// over HTTP from Python (args.sglang_router_ip / args.sglang_router_port).
TEST(PythonHookTrainTest, ARolloutFunctionAndDataSourceTrainCheckpointAndResume) {
  if (!std::filesystem::exists(::ooze::testing::ooze_binary())) GTEST_SKIP() << "no ooze binary";
  const std::string hooks = std::string(OOZE_TEST_HOOKS_DIR) + "/rollouts.py:";
  const std::string dir = ::ooze::testing::make_temp_dir("python-rollout-function");
  auto command = [&](const std::vector<std::string>& more) {
    std::vector<std::string> flags = {"--rollout-function-path",
                                      hooks + "train_rollout",
                                      "--data-source-path",
                                      hooks + "CountingSource",
                                      "--custom-eval-rollout-log-function-path",
                                      hooks + "log_eval_to_file",
                                      "--eval-interval",
                                      "1",
                                      "--save-interval",
                                      "1",
                                      "--save-debug-rollout-data",
                                      dir + "/samples_{rollout_id}.jsonl"};
    flags.insert(flags.end(), more.begin(), more.end());
    return ::ooze::testing::tiny_train_command(dir, flags);
  };
  Process run(command({"--num-rollout", "2", "--save", dir + "/save"}), {{"OMP_NUM_THREADS", "1"}},
              dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(180s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << run.output();

  // The data source handed out "count to N" in order (evaluations draw from it too) and saved
  // its position with each checkpoint, named by the checkpoint's last rollout.
  int64_t last_position = -1;
  for (int64_t rollout = 0; rollout < 2; ++rollout) {
    for (const nlohmann::json& sample :
         ::ooze::testing::read_json_lines(dir + "/samples_" + std::to_string(rollout) + ".jsonl")) {
      const std::string prompt = sample["prompt"].get<std::string>();
      ASSERT_EQ(prompt.rfind("count to ", 0), 0u) << prompt;
      const int64_t position = std::stoll(prompt.substr(9));
      EXPECT_GE(position, last_position);
      last_position = position;
    }
  }
  const nlohmann::json saved =
      nlohmann::json::parse(read_file(dir + "/save/counting_source_1.json"));
  EXPECT_GT(saved["position"].get<int64_t>(), last_position);

  int64_t rollout_lines = 0;
  for (const nlohmann::json& line : ::ooze::testing::read_json_lines(dir + "/out/metrics.jsonl")) {
    if (!line.contains("perf/step_time")) continue;
    EXPECT_EQ(line["rollout/python_groups"], 2) << line.dump();
    EXPECT_EQ(line["rollout/router_healthy"], 1) << line.dump();
    ++rollout_lines;
  }
  EXPECT_EQ(rollout_lines, 2);
  // Evaluations before rollouts 0 and 1 and of the final policy, each logged by the hook.
  const std::vector<nlohmann::json> evals =
      ::ooze::testing::read_json_lines(dir + "/out/python_eval_log.jsonl");
  ASSERT_EQ(evals.size(), 3u);
  for (size_t i = 0; i < evals.size(); ++i) {
    EXPECT_EQ(evals[i]["rollout_id"], i);
    EXPECT_EQ(evals[i]["samples"], 8);  // 2 groups of 4
  }

  // Resumed: the data source loads the saved position, so rollout 2 starts there.
  Process resumed(command({"--num-rollout", "3", "--load", dir + "/save", "--save",
                           dir + "/save-resumed", "--eval-interval", "0"}),
                  {{"OMP_NUM_THREADS", "1"}}, dir + "/resume-log.txt");
  const ::ooze::testing::ExitStatus resumed_status = resumed.wait(180s);
  ASSERT_TRUE(resumed_status.exited && resumed_status.code == 0)
      << resumed_status.describe() << "\n"
      << resumed.output();
  const std::vector<nlohmann::json> rollout2 =
      ::ooze::testing::read_json_lines(dir + "/samples_2.jsonl");
  ASSERT_FALSE(rollout2.empty());
  EXPECT_EQ(rollout2.front()["prompt"],
            "count to " + std::to_string(saved["position"].get<int64_t>()));
}

}  // namespace python_hook_train_test
}  // namespace ooze::launcher
