// `ooze rollout` as a user runs it: the real binary, local engines behind real HTTP servers,
// JSONL data, a built-in reward, evaluation, and the samples it saves.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/tokenizer.h"
#include "rollout/sample_json.h"
#include "tests/support/process.h"
#include "tests/support/tiny_model.h"

namespace ooze::launcher {
namespace rollout_command_test {

using ::ooze::testing::ooze_binary;

using namespace std::chrono_literals;
using nlohmann::json;

std::string write_prompts(const std::string& path, int count) {
  std::ofstream out(path);
  for (int i = 0; i < count; ++i) {
    out << json{{"input", "q" + std::to_string(i) + " ="}, {"label", std::to_string(i)}}.dump()
        << "\n";
  }
  return path;
}

// The JSON lines of the output (log lines start with '[').
std::vector<json> json_lines(const std::string& output) {
  std::vector<json> lines;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '{') lines.push_back(json::parse(line));
  }
  return lines;
}

TEST(RolloutCommandTest, RunsRolloutsAndEvaluationsAgainstLocalEngines) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("rollout-command");
  const std::string model = ::ooze::testing::tiny_model_dir();
  ::ooze::testing::Process run({ooze_binary(),
                                "rollout",
                                "--hf-checkpoint",
                                model,
                                "--prompt-data",
                                write_prompts(dir + "/train.jsonl", 6),
                                "--label-key",
                                "label",
                                "--rm-type",
                                "random",
                                "--rollout-batch-size",
                                "2",
                                "--n-samples-per-prompt",
                                "3",
                                "--rollout-max-response-len",
                                "6",
                                "--num-rollout",
                                "2",
                                "--rollout-num-engines",
                                "2",
                                "--save-debug-rollout-data",
                                dir + "/out/rollout_{rollout_id}.jsonl",
                                "--eval-prompt-data",
                                "toy," + write_prompts(dir + "/eval.jsonl", 3),
                                "--eval-interval",
                                "2",
                                "--n-samples-per-eval-prompt",
                                "2",
                                "--log-passrate"},
                               {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(120s);
  ASSERT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << run.output();

  // Evaluation before rollout 0, rollouts 0 and 1, evaluation after the last.
  const std::vector<json> lines = json_lines(run.output());
  ASSERT_EQ(lines.size(), 4u) << run.output();
  EXPECT_EQ(lines[0]["rollout_id"], 0);
  EXPECT_TRUE(lines[0].contains("eval/toy/pass@2"));
  EXPECT_EQ(lines[1]["rollout_id"], 0);
  EXPECT_EQ(lines[1]["rollout/samples"], 6);
  EXPECT_EQ(lines[2]["rollout_id"], 1);
  EXPECT_EQ(lines[3]["rollout_id"], 2);
  EXPECT_TRUE(lines[3].contains("eval/toy"));

  const models::Tokenizer tokenizer = models::load_tokenizer(model);
  for (int rollout_id = 0; rollout_id < 2; ++rollout_id) {
    std::ifstream saved(dir + "/out/rollout_" + std::to_string(rollout_id) + ".jsonl");
    ASSERT_TRUE(saved) << "rollout " << rollout_id << " was not saved";
    std::string line;
    int samples = 0;
    double reward_sum = 0;
    while (std::getline(saved, line)) {
      const rollout::Sample sample = rollout::sample_from_json(json::parse(line));
      // Rollout r holds prompts 2r and 2r + 1 (no shuffle), three samples each.
      const int64_t prompt = 2 * rollout_id + samples / 3;
      EXPECT_EQ(sample.group_index, prompt);
      EXPECT_EQ(sample.label, std::to_string(prompt));
      const std::vector<int64_t> prompt_tokens =
          tokenizer.encode("q" + std::to_string(prompt) + " =");
      EXPECT_EQ(std::vector<int64_t>(sample.tokens.begin(),
                                     sample.tokens.begin() + sample.prompt_length()),
                prompt_tokens);
      EXPECT_GT(sample.response_length, 0);
      reward_sum += sample.reward_value();
      ++samples;
    }
    EXPECT_EQ(samples, 6);
    EXPECT_DOUBLE_EQ(lines[1 + rollout_id]["rollout/raw_reward"].get<double>(), reward_sum / 6);
  }

  // An independent reader (Python's json) takes the saved file as Slime-shaped samples.
  if (std::filesystem::exists("/usr/bin/python3")) {
    const std::string check =
        "import json, sys\n"
        "for line in open(sys.argv[1]):\n"
        "    s = json.loads(line)\n"
        "    n = s['response_length']\n"
        "    assert len(s['loss_mask']) == len(s['rollout_log_probs']) == n, s\n"
        "    assert len(s['weight_versions']) == n and len(s['tokens']) > n, s\n"
        "    assert s['status'] in ('completed', 'truncated'), s\n"
        "    assert s['reward'] in (0, 1), s\n";
    ::ooze::testing::Process reader({"/usr/bin/python3", "-c", check, dir + "/out/rollout_0.jsonl"},
                                    {}, dir + "/python.txt");
    const ::ooze::testing::ExitStatus read = reader.wait(30s);
    EXPECT_TRUE(read.exited && read.code == 0) << read.describe() << "\n" << reader.output();
  }
}

TEST(RolloutCommandTest, BadDataFailsBeforeAnyEngineStarts) {
  if (!std::filesystem::exists(ooze_binary())) GTEST_SKIP() << ooze_binary() << " not built";
  const std::string dir = ::ooze::testing::make_temp_dir("rollout-command-bad");
  const std::string data = dir + "/bad.jsonl";
  std::ofstream(data) << "{\"input\": \"fine\"}\n{\"question\": \"no input\"}\n";
  ::ooze::testing::Process run(
      {ooze_binary(), "rollout", "--hf-checkpoint", ::ooze::testing::tiny_model_dir(),
       "--prompt-data", data, "--rm-type", "math"},
      {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
  const ::ooze::testing::ExitStatus status = run.wait(60s);
  EXPECT_TRUE(status.exited && status.code == 1) << status.describe();
  EXPECT_NE(run.output().find(data + ":2:"), std::string::npos) << run.output();
  EXPECT_EQ(run.output().find("in the rotation"), std::string::npos) << "engines were started";
}

}  // namespace rollout_command_test
}  // namespace ooze::launcher
