// A Python generate function in real rollouts against real engines: each policy turn made with
// ooze.generate is exactly what the engine samples for the sample's tokens so far (checked by
// asking the engine again, greedily), a tool's answer appended with ooze.append_observation is
// the tokenizer's tokens of its text with loss mask 0, a function that returns several samples
// puts them in the prompt's group sharing a rollout_id, and a function that returns what ooze
// cannot train on stops the rollout naming the hook and the sample.
#include <gtest/gtest.h>

#include <set>

#include "models/chat_template.h"
#include "rollout/rollout_manager.h"
#include "tests/support/expect_error.h"
#include "tests/support/served_engines.h"

namespace ooze::rollout {
namespace python_generate_test {

using nlohmann::json;

const std::string kGenerate = std::string(OOZE_TEST_HOOKS_DIR) + "/generate.py:";

class PythonGenerateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engines_ = new testing::ServedEngines(1); }
  static void TearDownTestSuite() {
    delete engines_;
    engines_ = nullptr;
  }

  // A rollout of 2 groups of 2 samples, greedy, through the Python function `function`.
  static RolloutResult rollout_with(const std::string& function) {
    std::vector<std::string> lines;
    for (int i = 0; i < 2; ++i) {
      lines.push_back(
          json{{"input", "tool question " + std::to_string(i)}, {"label", "42"}}.dump());
    }
    PromptDatasetOptions data;
    data.path = testing::write_lines("python-generate.jsonl", lines);
    data.label_key = "label";
    PromptSource source(std::make_shared<const PromptDataset>(data, engines_->tokenizer()));
    RewardOptions reward;
    reward.rm_type = "math";
    RewardModel rewards(reward);
    RolloutOptions options;
    options.rollout_batch_size = 2;
    options.n_samples_per_prompt = 2;
    options.progress_interval_s = 0;
    options.sampling.temperature = 0;
    options.sampling.max_response_len = 64;
    options.custom_generate_function_path = kGenerate + function;
    RolloutManager manager(options, source, engines_->router(), engines_->tokenizer(), rewards);
    return manager.generate(0);
  }

  // What the engine samples greedily after `tokens`, at most `max_new_tokens` of it.
  static std::vector<int64_t> greedy_after(const std::vector<int64_t>& tokens,
                                           int64_t max_new_tokens) {
    const json answer = engines_->router().generate(
        {{"input_ids", tokens},
         {"sampling_params", {{"temperature", 0}, {"max_new_tokens", max_new_tokens}}}});
    return answer.at("output_ids").get<std::vector<int64_t>>();
  }

  static testing::ServedEngines* engines_;
};
testing::ServedEngines* PythonGenerateTest::engines_ = nullptr;

TEST_F(PythonGenerateTest, TurnsAreTheEnginesTokensAndToolAnswersAreMaskedOut) {
  const RolloutResult result = rollout_with("turn_tool_turn");
  ASSERT_EQ(result.groups.size(), 2u);
  const std::vector<int64_t> observation = engines_->tokenizer().encode("<result>42</result>");
  for (const std::vector<Sample>& group : result.groups) {
    for (const Sample& sample : group) {
      const auto first = sample.metrics.at("first_turn").get<size_t>();
      ASSERT_EQ(sample.metrics.at("observation").get<size_t>(), observation.size());
      EXPECT_EQ(sample.metrics.at("encoded").get<size_t>(), observation.size());
      const auto prompt_end = sample.tokens.begin() + sample.prompt_length();
      const std::vector<int64_t> prompt(sample.tokens.begin(), prompt_end);
      const std::vector<int64_t> response(prompt_end, sample.tokens.end());
      ASSERT_GE(response.size(), first + observation.size());
      // Turn 1: the policy's (mask 1, the engine's log-probs and version), exactly the engine's.
      const std::vector<int64_t> turn1(response.begin(), response.begin() + first);
      EXPECT_EQ(turn1, greedy_after(prompt, 3));
      // The tool's answer: its text's tokens, mask 0, log-prob 0, version -1.
      EXPECT_EQ(std::vector<int64_t>(response.begin() + first,
                                     response.begin() + first + observation.size()),
                observation);
      // Turn 2: the engine's again, after everything before it.
      std::vector<int64_t> before_turn2 = prompt;
      before_turn2.insert(before_turn2.end(), response.begin(),
                          response.begin() + first + observation.size());
      EXPECT_EQ(std::vector<int64_t>(response.begin() + first + observation.size(), response.end()),
                greedy_after(before_turn2, 3));
      for (size_t i = 0; i < response.size(); ++i) {
        const bool tool = i >= first && i < first + observation.size();
        EXPECT_EQ(sample.loss_mask[i], tool ? 0 : 1) << i;
        EXPECT_EQ(sample.weight_versions[i], tool ? -1 : 0) << i;
        if (tool) {
          EXPECT_EQ(sample.rollout_log_probs[i], 0.0f) << i;
        } else {
          EXPECT_LE(sample.rollout_log_probs[i], 0.0f) << i;
        }
      }
      EXPECT_EQ(sample.response_length, static_cast<int64_t>(response.size()));
      EXPECT_TRUE(sample.reward.is_number());  // scored after the function returned
      // ooze.tokenizer.apply_chat_template, as ChatML writes a user turn and the prompt.
      EXPECT_EQ(sample.metadata.at("chat"),
                "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    }
  }
}

TEST_F(PythonGenerateTest, SplitConversationsStayInTheirGroupSharingARolloutId) {
  const RolloutResult result = rollout_with("split_in_two");
  ASSERT_EQ(result.groups.size(), 2u);
  for (const std::vector<Sample>& group : result.groups) {
    ASSERT_EQ(group.size(), 4u);  // 2 samples, each split in two, each piece after its sample
    for (size_t i = 0; i < group.size(); i += 2) {
      const Sample& first = group[i];
      const Sample& second = group[i + 1];
      EXPECT_EQ(first.rollout_id, first.index);
      EXPECT_EQ(second.rollout_id, first.rollout_id);
      EXPECT_EQ(first.reward, 0.25);  // the function's rewards, not the math reward's
      EXPECT_EQ(second.reward, 0.75);
      EXPECT_EQ(first.response_length, 2);
      // The second piece continues the first: its tokens start with all of the first's.
      ASSERT_GE(second.tokens.size(), first.tokens.size());
      EXPECT_TRUE(std::equal(first.tokens.begin(), first.tokens.end(), second.tokens.begin()));
    }
    EXPECT_NE(group[0].rollout_id, group[2].rollout_id);
  }
}

TEST_F(PythonGenerateTest, WhatOozeCannotTrainOnStopsTheRollout) {
  std::string message = ::ooze::testing::error_message_of<python::HookError>(
      [] { rollout_with("mixes_rollout_ids"); });
  EXPECT_CONTAINS(message, "returned samples of rollout_id 1 and 2");
  message =
      ::ooze::testing::error_message_of<python::HookError>([] { rollout_with("breaks_the_mask"); });
  EXPECT_CONTAINS(message, "--custom-generate-function-path " + kGenerate + "breaks_the_mask");
  EXPECT_CONTAINS(message, "in a form ooze cannot train on");
}

// An agent run from a generate function on ooze.agent_session(): the session's two calls are
// the sample (prompt of the first call, then its completion, the template's text for the next
// user turn with loss mask 0, the second completion), with the reward the function set.
TEST_F(PythonGenerateTest, AnAgentOnItsSessionBecomesTheSample) {
  const RolloutResult result = rollout_with("agent_via_session");
  ASSERT_EQ(result.groups.size(), 2u);
  std::set<std::string> urls;
  for (const std::vector<Sample>& group : result.groups) {
    for (const Sample& sample : group) {
      EXPECT_EQ(sample.reward, 0.75);
      EXPECT_EQ(sample.metrics.at("agent/turns"), 2);
      urls.insert(sample.metadata.at("base_url").get<std::string>());
      // The prompt is the first call's: the dataset's text rendered as a user turn.
      const models::ChatTemplate chat = models::select_chat_template(engines_->tokenizer(), "");
      EXPECT_TRUE(sample.prompt == chat.render({{"user", "tool question 0", std::nullopt}}, true) ||
                  sample.prompt == chat.render({{"user", "tool question 1", std::nullopt}}, true))
          << sample.prompt;
      // Policy, observation, policy: both turns of at most 4 tokens, the user turn between.
      std::vector<int32_t> runs;
      for (int32_t mask : sample.loss_mask) {
        if (runs.empty() || runs.back() != mask) runs.push_back(mask);
      }
      EXPECT_EQ(runs, (std::vector<int32_t>{1, 0, 1})) << sample.response;
      EXPECT_NE(sample.response.find("<|im_start|>user\n<result>42</result><|im_end|>"),
                std::string::npos)
          << sample.response;
    }
  }
  EXPECT_EQ(urls.size(), 4u) << "every sample has a session of its own";
}

}  // namespace python_generate_test
}  // namespace ooze::rollout
