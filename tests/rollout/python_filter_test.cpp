// Python filters in real rollouts against real engines: DAPO's dynamic-sampling filter
// (examples/algorithms/dapo_filter.py) keeps exactly the groups whose rewards differ and counts
// its reasons, a Python buffer filter chooses which buffered groups a rollout continues (and
// removes them from the buffer in place, as Slime's do), and a filter that raises or returns the
// wrong type stops the rollout naming the flag and what was expected.
#include <gtest/gtest.h>

#include <set>

#include "rollout/rollout_manager.h"
#include "rollout/sample_json.h"
#include "tests/support/expect_error.h"
#include "tests/support/served_engines.h"

namespace ooze::rollout {
namespace python_filter_test {

using nlohmann::json;

const std::string kHooks = OOZE_TEST_HOOKS_DIR;

std::shared_ptr<const PromptDataset> questions(const models::Tokenizer& tokenizer, int count) {
  std::vector<std::string> lines;
  for (int i = 0; i < count; ++i) {
    lines.push_back(json{{"input", "question " + std::to_string(i) + ":"}, {"label", "x"}}.dump());
  }
  PromptDatasetOptions options;
  options.path = testing::write_lines("python-filter-questions.jsonl", lines);
  options.label_key = "label";
  return std::make_shared<const PromptDataset>(options, tokenizer);
}

RewardModel parity_reward() {
  RewardOptions options;
  options.custom_rm_path = kHooks + "/rewards.py:first_token_parity";
  return RewardModel(options);
}

RolloutOptions small_rollout(int64_t batch, int64_t n) {
  RolloutOptions options;
  options.rollout_batch_size = batch;
  options.n_samples_per_prompt = n;
  options.sampling.max_response_len = 6;
  options.progress_interval_s = 0;
  return options;
}

class PythonFilterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engines_ = new testing::ServedEngines(1); }
  static void TearDownTestSuite() {
    delete engines_;
    engines_ = nullptr;
  }
  static testing::ServedEngines* engines_;
};
testing::ServedEngines* PythonFilterTest::engines_ = nullptr;

TEST_F(PythonFilterTest, DapoFilterKeepsGroupsWhoseRewardsDifferAndCountsItsReasons) {
  PromptSource source(questions(engines_->tokenizer(), 60));
  RewardModel rewards = parity_reward();
  RolloutOptions options = small_rollout(3, 3);
  options.over_sampling_batch_size = 6;
  options.dynamic_sampling_filter_path =
      std::string(OOZE_SOURCE_DIR) + "/examples/algorithms/dapo_filter.py:check_reward_nonzero_std";
  RolloutManager manager(options, source, engines_->router(), engines_->tokenizer(), rewards);
  double dropped = 0;
  // A group of 3 agrees about one time in four: over 4 rollouts (24 groups or more) the chance
  // that none is dropped is about 1e-3; over 2 it was 3e-2, and it happened.
  for (int rollout = 0; rollout < 4; ++rollout) {
    const RolloutResult result = manager.generate(rollout);
    ASSERT_EQ(result.groups.size(), 3u);
    for (const std::vector<Sample>& group : result.groups) {
      std::set<double> values;
      for (const Sample& sample : group) values.insert(sample.reward.get<double>());
      EXPECT_GT(values.size(), 1u) << "a group whose rewards all agree was kept";
    }
    // Every dropped group is counted under the reason the filter gave: its shared reward.
    const double zero = result.metrics.count("rollout/dynamic_filter/drop_zero_std_0.0")
                            ? result.metrics.at("rollout/dynamic_filter/drop_zero_std_0.0")
                            : 0.0;
    const double one = result.metrics.count("rollout/dynamic_filter/drop_zero_std_1.0")
                           ? result.metrics.at("rollout/dynamic_filter/drop_zero_std_1.0")
                           : 0.0;
    EXPECT_EQ(zero + one, result.metrics.at("rollout/dynamic_filter/dropped_groups"));
    dropped += zero + one;
  }
  EXPECT_GT(dropped, 0) << "groups of 3 parities: some should agree";
}

TEST_F(PythonFilterTest, BufferFilterChoosesTheGroupsARolloutContinues) {
  PromptSource source(questions(engines_->tokenizer(), 10));
  RewardModel rewards = parity_reward();
  RolloutOptions options = small_rollout(2, 2);
  options.partial_rollout = true;
  options.buffer_filter_path = kHooks + "/filters.py:newest_first";
  RolloutManager manager(options, source, engines_->router(), engines_->tokenizer(), rewards);
  // A buffer of four unstarted groups, as an earlier rollout would have left them (group
  // indices 100..103), then a rollout of two: the filter takes the two newest.
  json state = manager.state();
  std::vector<std::vector<Sample>> buffer;
  for (int64_t g = 0; g < 4; ++g) {
    std::vector<Sample> group(2);
    for (int64_t i = 0; i < 2; ++i) {
      group[i].group_index = 100 + g;
      group[i].index = 1000 + 2 * g + i;
      group[i].tokens = engines_->tokenizer().encode("question " + std::to_string(g) + ":");
      group[i].prompt = "question";
      group[i].label = "x";
    }
    buffer.push_back(group);
  }
  state["partial_rollout_buffer"] = groups_to_json(buffer);
  manager.restore(state);
  const RolloutResult result = manager.generate(0);
  std::set<int64_t> continued;
  for (const std::vector<Sample>& group : result.groups) continued.insert(group[0].group_index);
  EXPECT_EQ(continued, (std::set<int64_t>{102, 103}));
  // What the filter removed left the buffer; the other two wait there.
  std::set<int64_t> waiting;
  for (const auto& group : groups_from_json(manager.state()["partial_rollout_buffer"])) {
    waiting.insert(group[0].group_index);
  }
  EXPECT_TRUE(waiting.count(100) && waiting.count(101)) << manager.state().dump();
  EXPECT_FALSE(waiting.count(102) || waiting.count(103));
}

TEST_F(PythonFilterTest, AFilterThatRaisesOrAnswersWronglyStopsTheRollout) {
  const auto failure_of = [&](const std::string& function) {
    PromptSource source(questions(engines_->tokenizer(), 10));
    RewardModel rewards = parity_reward();
    RolloutOptions options = small_rollout(2, 2);
    options.dynamic_sampling_filter_path = kHooks + "/filters.py:" + function;
    RolloutManager manager(options, source, engines_->router(), engines_->tokenizer(), rewards);
    return ::ooze::testing::error_message_of<python::HookError>([&] { manager.generate(0); });
  };
  std::string message = failure_of("raises");
  EXPECT_CONTAINS(message, "--dynamic-sampling-filter-path " + kHooks + "/filters.py:raises");
  EXPECT_CONTAINS(message, "raised on group");
  EXPECT_CONTAINS(message, "KeyError: 'no such judge'");
  message = failure_of("returns_dict");
  EXPECT_CONTAINS(message,
                  "returned a dict ({'keep': True}); a dynamic-sampling filter returns "
                  "DynamicFilterOutput(keep, reason) or a bool");
}

}  // namespace python_filter_test
}  // namespace ooze::rollout
