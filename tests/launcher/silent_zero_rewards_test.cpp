// Rewards that would be 0 whatever the model answers, as a user meets them on the real binary:
// `ooze train` and `ooze rollout` refuse prompt data a built-in reward cannot score (no
// --label-key, a prompt with an empty label), `ooze reward` refuses a line without a label,
// list labels score their best answer, and `ooze rollout` says when a rollout spans several
// epochs of the data and when rewards stay identical rollout after rollout.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/launcher/tiny_train_command.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"
#include "tests/support/tiny_model.h"

namespace ooze::launcher {
namespace silent_zero_rewards_test {

using ::ooze::testing::ooze_binary;
using namespace std::chrono_literals;
using nlohmann::json;
using ::ooze::testing::read_file;

std::string quoted(const std::string& text) { return "'" + text + "'"; }

// `ooze reward FLAGS < LINES`: the exit code, the answers on stdout and what went to stderr.
struct RewardRun {
  ::ooze::testing::ExitStatus status;
  std::vector<json> answers;
  std::string errors;
};

RewardRun ooze_reward(const std::string& flags, const std::string& lines) {
  const std::string dir = ::ooze::testing::make_temp_dir("silent-zero-reward");
  std::ofstream(dir + "/in.jsonl") << lines;
  ::ooze::testing::Process process(
      {"/bin/bash", "-c",
       quoted(ooze_binary()) + " reward " + flags + " < " + quoted(dir + "/in.jsonl") + " > " +
           quoted(dir + "/out") + " 2> " + quoted(dir + "/err")},
      {}, "");
  RewardRun run;
  run.status = process.wait(60s);
  std::istringstream out(read_file(dir + "/out"));
  for (std::string line; std::getline(out, line);) run.answers.push_back(json::parse(line));
  run.errors = read_file(dir + "/err");
  return run;
}

TEST(SilentZeroRewardsTest, TrainRefusesAMathRewardWithoutALabelKey) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("silent-zero-train");
  // tiny_train_command's data has a "label" key; the run names none.
  ::ooze::testing::Process run(
      ::ooze::testing::tiny_train_command(dir, {"--rm-type", "math", "--label-key", ""}),
      {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(120s);
  EXPECT_TRUE(status.exited && status.code == 1) << status.describe() << "\n" << run.output();
  EXPECT_CONTAINS(run.output(), "--rm-type math compares each response to a label");
  EXPECT_CONTAINS(run.output(), "no --label-key is given");
  EXPECT_CONTAINS(run.output(), dir + "/train.jsonl:1");
  EXPECT_CONTAINS(run.output(), "the first line has keys: input, label");
  EXPECT_FALSE(std::filesystem::exists(dir + "/out/metrics.jsonl")) << "the job ran";
}

TEST(SilentZeroRewardsTest, RolloutRefusesPromptsWithAnEmptyLabel) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("silent-zero-rollout");
  const std::string data = dir + "/data.jsonl";
  std::ofstream(data) << R"({"input": "1+1=", "answer": "2"})"
                      << "\n"
                      << R"({"input": "2+2=", "answer": "4"})"
                      << "\n"
                      << R"({"input": "3+3=", "answer": null})"
                      << "\n"
                      << R"({"input": "4+4=", "answer": ""})"
                      << "\n";
  ::ooze::testing::Process run(
      {ooze_binary(), "rollout", "--hf-checkpoint", ::ooze::testing::tiny_model_dir(),
       "--prompt-data", data, "--label-key", "answer", "--rm-type", "f1"},
      {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(60s);
  EXPECT_TRUE(status.exited && status.code == 1) << status.describe() << "\n" << run.output();
  EXPECT_CONTAINS(run.output(), "--rm-type f1 compares each response to a label");
  EXPECT_CONTAINS(run.output(), "2 of 4 prompts of " + data + " (the first at " + data + ":3)");
  EXPECT_CONTAINS(run.output(), "empty or null 'answer' (--label-key)");
  EXPECT_EQ(run.output().find("in the rotation"), std::string::npos) << "engines were started";
}

TEST(SilentZeroRewardsTest, RewardRefusesALineWithoutALabel) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const RewardRun run = ooze_reward("--rm-type math", R"({"response": "\\boxed{4}", "label": "4"})"
                                                      "\n"
                                                      R"({"response": "\\boxed{4}", "answer": "4"})"
                                                      "\n"
                                                      R"({"response": "\\boxed{4}", "label": null})"
                                                      "\n");
  EXPECT_TRUE(run.status.exited && run.status.code == 1) << run.status.describe() << run.errors;
  ASSERT_EQ(run.answers.size(), 3u) << run.errors;
  EXPECT_EQ(run.answers[0]["reward"], 1.0);
  ASSERT_TRUE(run.answers[1].contains("error")) << run.answers[1];
  const std::string missing = run.answers[1]["error"];
  EXPECT_CONTAINS(missing, "line 2: --rm-type math compares the response to a label");
  EXPECT_CONTAINS(missing, "'label' is missing (its keys: answer, response)");
  ASSERT_TRUE(run.answers[2].contains("error")) << run.answers[2];
  EXPECT_CONTAINS(run.answers[2]["error"].get<std::string>(), "line 3:");
  EXPECT_CONTAINS(run.answers[2]["error"].get<std::string>(), "'label' is empty");

  // random reads no label; a custom reward is not second-guessed.
  const RewardRun random = ooze_reward("--rm-type random", R"({"response": "x"})"
                                                           "\n");
  EXPECT_TRUE(random.status.exited && random.status.code == 0) << random.errors;
}

TEST(SilentZeroRewardsTest, ListLabelsScoreTheirBestAnswer) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const RewardRun f1 =
      ooze_reward("--rm-type f1", R"({"response": "Paris", "label": ["Paris", "x"]})"
                                  "\n");
  ASSERT_EQ(f1.answers.size(), 1u) << f1.errors;
  EXPECT_EQ(f1.answers[0]["reward"], 1.0);
  const RewardRun math =
      ooze_reward("--rm-type math", R"({"response": "\\boxed{0.5}", "label": ["1/3", "1/2"]})"
                                    "\n");
  ASSERT_EQ(math.answers.size(), 1u) << math.errors;
  EXPECT_EQ(math.answers[0]["reward"], 1.0);
}

TEST(SilentZeroRewardsTest, RolloutSaysWhatTheDataShowsOfIdenticalRewards) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("silent-zero-streak");
  const std::string data = dir + "/data.jsonl";
  std::ofstream(data) << R"({"input": "1+1=", "label": "2"})"
                      << "\n"
                      << R"({"input": "2+2=", "label": "4"})"
                      << "\n";
  // Two-token responses never hold a \boxed{} answer: math scores every sample 0.
  ::ooze::testing::Process run(
      {ooze_binary(), "rollout", "--hf-checkpoint", ::ooze::testing::tiny_model_dir(),
       "--prompt-data", data, "--label-key", "label", "--rm-type", "math", "--rollout-batch-size",
       "3", "--n-samples-per-prompt", "2", "--rollout-max-response-len", "2", "--num-rollout", "5"},
      {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(120s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << run.output();
  const std::string output = run.output();
  // The batch is larger than the data: said once, at start.
  EXPECT_CONTAINS(output, "--prompt-data " + data +
                              " has 2 prompts, fewer than --rollout-batch-size 3: each rollout "
                              "spans 1.5 epochs of it");
  // Five rollouts of zeros: one warning, after the third, naming the length limit.
  EXPECT_CONTAINS(output, "rollouts 0 to 2: every sample of each got the same reward (0");
  const std::string phrase = "got the same reward";
  const size_t first = output.find(phrase);
  EXPECT_EQ(output.find(phrase, first + 1), std::string::npos) << "warned twice:\n" << output;
  // Every response, or nearly (a random model may emit EOS within two tokens).
  EXPECT_CONTAINS(output, "cut at --rollout-max-response-len 2 (finish reason length)");
  EXPECT_EQ(output.find("label is empty"), std::string::npos) << output;
}

TEST(SilentZeroRewardsTest, RolloutNamesAStopThatEndsEveryResponse) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("silent-zero-stop");
  const std::string data = dir + "/data.jsonl";
  std::ofstream(data) << R"({"input": "1+1=", "label": "2"})"
                      << "\n";
  // Every token of the byte tokenizer's vocabulary stops: every response is one token long.
  std::string every_token;
  for (int id = 0; id < 259; ++id) every_token += (id > 0 ? "," : "") + std::to_string(id);
  ::ooze::testing::Process run({ooze_binary(),
                                "rollout",
                                "--hf-checkpoint",
                                ::ooze::testing::tiny_model_dir(),
                                "--prompt-data",
                                data,
                                "--label-key",
                                "label",
                                "--rm-type",
                                "math",
                                "--rollout-batch-size",
                                "1",
                                "--n-samples-per-prompt",
                                "2",
                                "--rollout-max-response-len",
                                "16",
                                "--rollout-stop-token-ids",
                                every_token,
                                "--num-rollout",
                                "3"},
                               {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(120s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << run.output();
  EXPECT_CONTAINS(run.output(),
                  "The likely cause: every response ended on a --rollout-stop-token-ids token "
                  "[0,1,2,3,4,5,6,7, ... (259 in all)], after exactly 1 token");
  EXPECT_EQ(run.output().find("cut at"), std::string::npos) << run.output();
}

}  // namespace silent_zero_rewards_test
}  // namespace ooze::launcher
