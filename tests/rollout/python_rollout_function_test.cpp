// Whole rollouts in Python against real engines: a rollout function written like ooze's own
// rollout (draw, ooze.generate, ooze.score) gives exactly the built-in rollout's samples and
// rewards (greedy, same prompts); an eval function's data becomes eval/* metrics; a data source
// class hands out the prompts, tokenized by ooze, with indices; the all-samples hook sees the
// groups dynamic sampling dropped; and a function that raises or returns something else stops the
// rollout with its name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "python/hook_args.h"
#include "rollout/rollout_manager.h"
#include "tests/support/expect_error.h"
#include "tests/support/served_engines.h"

namespace ooze::rollout {
namespace python_rollout_function_test {

using nlohmann::json;

const std::string kHooks = std::string(OOZE_TEST_HOOKS_DIR) + "/rollouts.py:";

class PythonRolloutFunctionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engines_ = new testing::ServedEngines(1); }
  static void TearDownTestSuite() {
    delete engines_;
    engines_ = nullptr;
  }

  // 4 prompts "what is I + 1?" with labels; each line's metadata names `record_to`.
  static std::shared_ptr<const PromptDataset> dataset(const std::string& record_to = "") {
    std::vector<std::string> lines;
    for (int i = 0; i < 4; ++i) {
      lines.push_back(json{{"input", "what is " + std::to_string(i) + " + 1?"},
                           {"label", std::to_string(i + 1)},
                           {"metadata", {{"record_to", record_to}}}}
                          .dump());
    }
    PromptDatasetOptions data;
    data.path = testing::write_lines("python-rollout.jsonl", lines);
    data.label_key = "label";
    return std::make_shared<const PromptDataset>(data, engines_->tokenizer());
  }

  // What the hooks read of `args` (ooze train sets every flag).
  static RolloutOptions options() {
    python::set_hook_args({{"rollout_batch_size", 2}, {"n_samples_per_prompt", 2}});
    RolloutOptions options;
    options.rollout_batch_size = 2;
    options.n_samples_per_prompt = 2;
    options.progress_interval_s = 0;
    options.sampling.temperature = 0;
    options.sampling.max_response_len = 8;
    return options;
  }

  static RewardOptions math_reward() {
    RewardOptions reward;
    reward.rm_type = "math";
    return reward;
  }

  static testing::ServedEngines* engines_;
};
testing::ServedEngines* PythonRolloutFunctionTest::engines_ = nullptr;

TEST_F(PythonRolloutFunctionTest, APythonRolloutGivesTheBuiltInRolloutsSamples) {
  RewardModel rewards(math_reward());
  PromptSource builtin_source(dataset());
  RolloutManager builtin(options(), builtin_source, engines_->router(), engines_->tokenizer(),
                         rewards);
  const RolloutResult expected = builtin.generate(0);

  for (const char* function : {"greedy_rollout", "async_rollout"}) {
    SCOPED_TRACE(function);
    RolloutOptions with_function = options();
    with_function.rollout_function_path = kHooks + function;
    PromptSource source(dataset());
    RolloutManager manager(with_function, source, engines_->router(), engines_->tokenizer(),
                           rewards);
    const RolloutResult result = manager.generate(0);
    ASSERT_EQ(result.groups.size(), expected.groups.size());
    for (size_t g = 0; g < expected.groups.size(); ++g) {
      ASSERT_EQ(result.groups[g].size(), expected.groups[g].size());
      for (size_t i = 0; i < expected.groups[g].size(); ++i) {
        const Sample& got = result.groups[g][i];
        const Sample& want = expected.groups[g][i];
        EXPECT_EQ(got.index, want.index);
        EXPECT_EQ(got.group_index, want.group_index);
        EXPECT_EQ(got.tokens, want.tokens);
        EXPECT_EQ(got.loss_mask, want.loss_mask);
        EXPECT_EQ(got.status, want.status);
        EXPECT_EQ(got.reward, want.reward);
        ASSERT_EQ(got.rollout_log_probs.size(), want.rollout_log_probs.size());
        for (size_t t = 0; t < got.rollout_log_probs.size(); ++t) {
          EXPECT_NEAR(got.rollout_log_probs[t], want.rollout_log_probs[t], 1e-5);
        }
      }
    }
    EXPECT_EQ(result.metrics.at("rollout/raw_reward"), expected.metrics.at("rollout/raw_reward"));
    if (std::string(function) == "greedy_rollout") {
      EXPECT_EQ(result.metrics.at("rollout/python_groups"), 2.0);  // the function's own metric
    }
  }
}

TEST_F(PythonRolloutFunctionTest, TheEvalFunctionsDataBecomesEvalMetrics) {
  RewardModel rewards(math_reward());
  RolloutOptions with_function = options();
  with_function.rollout_function_path = kHooks + "greedy_rollout";
  PromptSource source(dataset());
  RolloutManager manager(with_function, source, engines_->router(), engines_->tokenizer(), rewards);
  ASSERT_TRUE(manager.has_eval_function());  // the rollout function evaluates too, as in Slime
  EvalOptions eval_options;
  const Evaluation evaluation = manager.evaluate({}, eval_options, 3);
  ASSERT_EQ(evaluation.data.count("toy"), 1u);
  const EvalData& toy = evaluation.data.at("toy");
  ASSERT_EQ(toy.samples.size(), 4u);
  double sum = 0;
  for (double reward : toy.rewards) sum += reward;
  EXPECT_DOUBLE_EQ(evaluation.metrics.at("eval/toy"), sum / 4);
  EXPECT_EQ(evaluation.metrics.at("eval/toy/calls"), 1.0);
  EXPECT_TRUE(evaluation.metrics.count("eval/toy/response_len/mean"));  // from the samples
}

TEST_F(PythonRolloutFunctionTest, ADataSourceClassHandsOutThePrompts) {
  RewardModel rewards(math_reward());
  RolloutOptions with_source = options();
  with_source.data_source_path = kHooks + "CountingSource";
  PromptSource source(dataset());
  RolloutManager manager(with_source, source, engines_->router(), engines_->tokenizer(), rewards);
  for (int64_t rollout_id = 0; rollout_id < 2; ++rollout_id) {
    const RolloutResult result = manager.generate(rollout_id);
    ASSERT_EQ(result.groups.size(), 2u);
    for (size_t g = 0; g < 2; ++g) {
      const int64_t position = rollout_id * 2 + static_cast<int64_t>(g);
      const std::string prompt = "count to " + std::to_string(position);
      for (const Sample& sample : result.groups[g]) {
        EXPECT_EQ(sample.prompt, prompt);
        EXPECT_EQ(sample.label, std::to_string(position));
        const std::vector<int64_t> prompt_tokens = engines_->tokenizer().encode(prompt);
        EXPECT_TRUE(std::equal(prompt_tokens.begin(), prompt_tokens.end(), sample.tokens.begin()));
        EXPECT_EQ(sample.prompt_length(), static_cast<int64_t>(prompt_tokens.size()));
        EXPECT_EQ(sample.group_index, result.groups[g].front().index);  // the first one's index
      }
      EXPECT_NE(result.groups[g][0].index, result.groups[g][1].index);
    }
  }
}

TEST_F(PythonRolloutFunctionTest, TheAllSamplesHookSeesTheGroupsDynamicSamplingDropped) {
  const std::string record = testing::write_lines("all-samples.jsonl", {});
  RewardModel rewards(math_reward());
  RolloutOptions with_hook = options();
  with_hook.rollout_batch_size = 2;
  with_hook.over_sampling_batch_size = 4;
  with_hook.dynamic_sampling_filter_path = kHooks + "keep_odd_groups";
  with_hook.rollout_all_samples_process_path = kHooks + "record_all_samples";
  PromptSource source(dataset(record));
  RolloutManager manager(with_hook, source, engines_->router(), engines_->tokenizer(), rewards);
  const RolloutResult result = manager.generate(0);
  EXPECT_EQ(result.metrics.at("rollout/dynamic_filter/kept_groups"), 2.0);
  const auto dropped =
      static_cast<size_t>(result.metrics.at("rollout/dynamic_filter/dropped_groups"));
  // Groups 1 and 3 are kept; the even ones that finished before them were dropped and are seen
  // too (those still running when the second was kept are left over, not finished).
  std::ifstream in(record);
  std::string line;
  std::vector<int64_t> seen;
  while (std::getline(in, line)) {
    const json group = json::parse(line);
    seen.push_back(group.at("group_index").get<int64_t>());
    for (const json& reward : group.at("rewards")) EXPECT_TRUE(reward.is_number());
  }
  EXPECT_EQ(seen.size(), 2 + dropped);
  int64_t odd = 0;
  for (int64_t group_index : seen) odd += group_index % 2;
  EXPECT_EQ(odd, 2);
}

TEST_F(PythonRolloutFunctionTest, AFunctionThatRaisesOrReturnsTextStopsTheRollout) {
  RewardModel rewards(math_reward());
  auto rollout_with = [&](const std::string& path) {
    RolloutOptions with_function = options();
    with_function.rollout_function_path = path;
    PromptSource source(dataset());
    RolloutManager manager(with_function, source, engines_->router(), engines_->tokenizer(),
                           rewards);
    manager.generate(5);
  };
  std::string message = ::ooze::testing::error_message_of<python::HookError>(
      [&] { rollout_with(kHooks + "raises"); });
  EXPECT_CONTAINS(message, "--rollout-function-path " + kHooks + "raises raised on rollout 5");
  EXPECT_CONTAINS(message, "ValueError: no rollout 5 today");
  message = ::ooze::testing::error_message_of<python::HookError>(
      [&] { rollout_with(kHooks + "returns_text"); });
  EXPECT_CONTAINS(message, "returned str, not a list of groups");
  message =
      ::ooze::testing::error_message_of<ConfigError>([&] { rollout_with("libmine.so:rollout"); });
  EXPECT_CONTAINS(message, "is not a Python function");

  RolloutOptions with_source = options();
  with_source.data_source_path = kHooks + "NotASource";
  PromptSource source(dataset());
  message = ::ooze::testing::error_message_of<python::HookError>([&] {
    RolloutManager manager(with_source, source, engines_->router(), engines_->tokenizer(), rewards);
  });
  EXPECT_CONTAINS(message, "which has no get_samples method");
}

}  // namespace python_rollout_function_test
}  // namespace ooze::rollout
