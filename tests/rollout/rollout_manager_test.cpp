// The rollout manager against real engines serving the tiny model over HTTP, through the router,
// with real JSONL files and plugins built as shared libraries.
#include "rollout/rollout_manager.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>
#include <thread>

#include "rollout/sample_json.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"
#include "tests/support/served_engines.h"

namespace ooze::rollout {
namespace rollout_manager_test {

using nlohmann::json;

const std::string kPlugins = OOZE_ROLLOUT_TEST_PLUGINS;

std::shared_ptr<const PromptDataset> dataset(const models::Tokenizer& tokenizer, int prompts,
                                             const std::string& name = "prompts.jsonl") {
  std::vector<std::string> lines;
  for (int i = 0; i < prompts; ++i) {
    lines.push_back(json{
        {"input", "question " + std::to_string(i) + ":"},
        {"label", std::to_string(i)},
        {"metadata",
         {{"id", i}}}}.dump());
  }
  PromptDatasetOptions options;
  options.path = testing::write_lines(name, lines);
  options.label_key = "label";
  return std::make_shared<const PromptDataset>(options, tokenizer);
}

RewardModel parity_reward() {
  RewardOptions options;
  options.custom_rm_path = kPlugins + ":first_token_parity";
  return RewardModel(options);
}

RolloutOptions options(int64_t batch, int64_t n, int64_t max_len) {
  RolloutOptions options;
  options.rollout_batch_size = batch;
  options.n_samples_per_prompt = n;
  options.sampling.max_response_len = max_len;
  options.progress_interval_s = 0;
  return options;
}

class RolloutManagerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engines_ = new testing::ServedEngines(2); }
  static void TearDownTestSuite() {
    delete engines_;
    engines_ = nullptr;
  }
  static testing::ServedEngines* engines_;
};
testing::ServedEngines* RolloutManagerTest::engines_ = nullptr;

TEST_F(RolloutManagerTest, RolloutHasTheBatchOfGroupsWithEveryFieldConsistent) {
  auto data = dataset(engines_->tokenizer(), 10);
  PromptSource source(data);
  RewardModel rewards = parity_reward();
  RolloutManager manager(options(4, 3, 12), source, engines_->router(), engines_->tokenizer(),
                         rewards);
  RolloutResult result = manager.generate(0);
  ASSERT_EQ(result.groups.size(), 4u);
  std::set<int64_t> indices;
  double reward_sum = 0;
  for (size_t g = 0; g < result.groups.size(); ++g) {
    const std::vector<Sample>& group = result.groups[g];
    ASSERT_EQ(group.size(), 3u);
    const Prompt& prompt = data->at(static_cast<int64_t>(g));  // no shuffle: file order
    for (const Sample& sample : group) {
      EXPECT_EQ(sample.group_index, static_cast<int64_t>(g));
      EXPECT_TRUE(indices.insert(sample.index).second);
      EXPECT_EQ(sample.prompt, prompt.text);
      EXPECT_EQ(sample.label, std::to_string(g));
      EXPECT_EQ(sample.metadata["id"], static_cast<int>(g));
      ASSERT_GT(sample.response_length, 0);
      EXPECT_LE(sample.response_length, 12);
      // Prompt tokens first, then the response; per-token vectors cover the response.
      EXPECT_EQ(std::vector<int64_t>(sample.tokens.begin(),
                                     sample.tokens.begin() + sample.prompt_length()),
                prompt.tokens);
      EXPECT_EQ(sample.loss_mask, std::vector<int32_t>(sample.response_length, 1));
      EXPECT_EQ(sample.rollout_log_probs.size(), static_cast<size_t>(sample.response_length));
      for (float logprob : sample.rollout_log_probs) EXPECT_LE(logprob, 0.0f);
      EXPECT_EQ(sample.weight_versions, std::vector<int64_t>(sample.response_length, 0));
      EXPECT_TRUE(sample.status == Sample::Status::kCompleted ||
                  sample.status == Sample::Status::kTruncated);
      // The reward is the plugin's rule, recomputed here.
      const int64_t first = sample.tokens[static_cast<size_t>(sample.prompt_length())];
      EXPECT_EQ(sample.reward.get<double>(), static_cast<double>(first % 2));
      reward_sum += first % 2;
    }
  }
  EXPECT_DOUBLE_EQ(result.metrics.at("rollout/raw_reward"), reward_sum / 12);
  EXPECT_EQ(result.metrics.at("rollout/samples"), 12);
  EXPECT_GT(result.metrics.at("perf/rollout_tokens_per_sec"), 0);
  // The next rollout continues with the next prompts.
  EXPECT_EQ(manager.generate(1).groups.front().front().group_index, 4);
}

TEST_F(RolloutManagerTest, DynamicSamplingKeepsExactlyTheBatchAndNoZeroStdGroup) {
  auto data = dataset(engines_->tokenizer(), 40);
  PromptSource source(data);
  RewardModel rewards = parity_reward();
  RolloutOptions opts = options(3, 4, 8);
  opts.over_sampling_batch_size = 6;
  opts.dynamic_sampling_filter_path = "nonzero_std";
  RolloutManager manager(opts, source, engines_->router(), engines_->tokenizer(), rewards);
  for (int rollout = 0; rollout < 3; ++rollout) {
    RolloutResult result = manager.generate(rollout);
    ASSERT_EQ(result.groups.size(), 3u);
    for (const std::vector<Sample>& group : result.groups) {
      std::set<double> values;
      for (const Sample& sample : group) values.insert(sample.reward.get<double>());
      EXPECT_GT(values.size(), 1u) << "a group whose rewards all agree reached the trainer";
    }
    EXPECT_EQ(result.metrics.at("rollout/dynamic_filter/kept_groups"), 3);
    EXPECT_EQ(result.metrics.at("rollout/zero_std_group_ratio"), 0);
    const double dropped = result.metrics.at("rollout/dynamic_filter/dropped_groups");
    EXPECT_EQ(result.metrics.count("rollout/dynamic_filter/drop_zero_std"), dropped > 0 ? 1u : 0u);
  }
}

TEST_F(RolloutManagerTest, PartialRolloutContinuesAbortedSamplesWithVersionsPerToken) {
  // Two sequences at a time per engine, so over-sampled groups wait or stop mid-way.
  testing::ServedEngines engines(2, /*max_running_requests=*/2);
  auto data = dataset(engines.tokenizer(), 40, "partial.jsonl");
  PromptSource source(data);
  RewardModel rewards = parity_reward();
  RolloutOptions opts = options(2, 2, 24);
  opts.over_sampling_batch_size = 6;
  opts.partial_rollout = true;
  opts.sampling.temperature = 0;  // greedy: a continued sample must equal an uninterrupted one
  RolloutManager manager(opts, source, engines.router(), engines.tokenizer(), rewards);

  // Rollouts until one leaves a sample stopped part-way in the buffer.
  std::vector<std::vector<Sample>> buffered;
  const Sample* partial = nullptr;
  for (int attempt = 0; attempt < 4 && partial == nullptr; ++attempt) {
    RolloutResult result = manager.generate(attempt);
    ASSERT_EQ(result.groups.size(), 2u);
    EXPECT_EQ(result.metrics.at("rollout/partial/buffered_groups"),
              static_cast<double>(manager.buffered_groups()));
    buffered = groups_from_json(manager.state()["partial_rollout_buffer"]);
    for (const auto& group : buffered) {
      for (const Sample& sample : group) {
        if (sample.response_length > 0 && sample.status == Sample::Status::kAborted) {
          partial = &sample;
        }
      }
    }
  }
  ASSERT_NE(partial, nullptr) << "no rollout stopped a sample part-way";
  const Sample before = *partial;

  // A weight update (no tensor changes) to version 1: the continuation is version 1's.
  for (auto& engine : engines.engines()) engine->load_weights({}, 1);
  opts.over_sampling_batch_size = 0;  // take every buffered group, let them all finish
  opts.rollout_batch_size = static_cast<int64_t>(manager.buffered_groups());
  RolloutManager next(opts, source, engines.router(), engines.tokenizer(), rewards);
  next.restore(manager.state());
  RolloutResult result = next.generate(99);
  const Sample* after = nullptr;
  for (const auto& group : result.groups) {
    for (const Sample& sample : group) {
      if (sample.index == before.index) after = &sample;
    }
  }
  ASSERT_NE(after, nullptr);
  const size_t kept = before.tokens.size();
  ASSERT_GT(after->tokens.size(), kept);
  EXPECT_EQ(std::vector<int64_t>(after->tokens.begin(), after->tokens.begin() + kept),
            before.tokens);
  EXPECT_EQ(std::vector<float>(after->rollout_log_probs.begin(),
                               after->rollout_log_probs.begin() + before.response_length),
            before.rollout_log_probs);
  for (int64_t i = 0; i < after->response_length; ++i) {
    EXPECT_EQ(after->weight_versions[i], i < before.response_length ? 0 : 1) << i;
  }
  EXPECT_EQ(after->distinct_weight_versions(), (std::vector<int64_t>{0, 1}));
  // The two parts together are what one uninterrupted greedy generation gives.
  json whole = engines.router().generate(
      {{"input_ids", std::vector<int64_t>(before.tokens.begin(),
                                          before.tokens.begin() + before.prompt_length())},
       {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 24}}}});
  std::vector<int64_t> response(after->tokens.begin() + after->prompt_length(),
                                after->tokens.end());
  EXPECT_EQ(response, whole["output_ids"].get<std::vector<int64_t>>());
}

TEST_F(RolloutManagerTest, ResumedManagerDrawsWhatTheUninterruptedOneWould) {
  auto data = dataset(engines_->tokenizer(), 7, "resume.jsonl");
  RewardModel rewards = parity_reward();
  RolloutOptions opts = options(3, 2, 4);
  auto prompts_of = [](const RolloutResult& result) {
    std::vector<std::string> prompts;
    for (const auto& group : result.groups) prompts.push_back(group.front().prompt);
    return prompts;
  };
  PromptSourceOptions shuffled;
  shuffled.shuffle = true;
  shuffled.seed = 5;
  PromptSource whole_source(data, shuffled);
  RolloutManager whole(opts, whole_source, engines_->router(), engines_->tokenizer(), rewards);
  std::vector<std::vector<std::string>> expected;
  for (int r = 0; r < 4; ++r) expected.push_back(prompts_of(whole.generate(r)));

  PromptSource first_source(data, shuffled);
  RolloutManager first(opts, first_source, engines_->router(), engines_->tokenizer(), rewards);
  EXPECT_EQ(prompts_of(first.generate(0)), expected[0]);
  const json saved = json::parse(first.state().dump());  // as a checkpoint stores it

  PromptSource resumed_source(data, shuffled);
  RolloutManager resumed(opts, resumed_source, engines_->router(), engines_->tokenizer(), rewards);
  resumed.restore(saved);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(prompts_of(resumed.generate(r)), expected[r]) << r;
}

TEST_F(RolloutManagerTest, CustomGenerateFunctionMasksWhatThePolicyDidNotSample) {
  auto data = dataset(engines_->tokenizer(), 4, "turns.jsonl");
  PromptSource source(data);
  RewardModel rewards = parity_reward();
  RolloutOptions opts = options(2, 2, 20);
  opts.custom_generate_function_path = kPlugins + ":two_turns";
  RolloutManager manager(opts, source, engines_->router(), engines_->tokenizer(), rewards);
  RolloutResult result = manager.generate(0);
  const std::vector<int64_t> observation = engines_->tokenizer().encode("<obs>");
  for (const auto& group : result.groups) {
    for (const Sample& sample : group) {
      // First turn: 5 policy tokens (the byte model rarely stops early), then the observation.
      const auto first_turn =
          static_cast<int64_t>(std::find(sample.loss_mask.begin(), sample.loss_mask.end(), 0) -
                               sample.loss_mask.begin());
      ASSERT_LE(first_turn, 5);
      ASSERT_GE(sample.response_length, first_turn + static_cast<int64_t>(observation.size()));
      for (size_t i = 0; i < observation.size(); ++i) {
        const size_t at = static_cast<size_t>(first_turn) + i;
        EXPECT_EQ(sample.loss_mask[at], 0);
        EXPECT_EQ(sample.weight_versions[at], -1);
        EXPECT_EQ(sample.rollout_log_probs[at], 0.0f);
        EXPECT_EQ(sample.tokens[static_cast<size_t>(sample.prompt_length()) + at], observation[i]);
      }
      EXPECT_NE(sample.response.find("<obs>"), std::string::npos);
      EXPECT_EQ(sample.metrics["turns"], 2);
    }
  }
  EXPECT_EQ(result.metrics.at("rollout/turns"), 2);
}

TEST_F(RolloutManagerTest, EvaluationReportsMeanRewardAndPassAtK) {
  auto eval = dataset(engines_->tokenizer(), 5, "eval.jsonl");
  auto data = dataset(engines_->tokenizer(), 5, "train.jsonl");
  PromptSource source(data);
  RewardModel rewards = parity_reward();
  RolloutManager manager(options(1, 1, 6), source, engines_->router(), engines_->tokenizer(),
                         rewards);
  EvalOptions eval_options;
  eval_options.n_samples_per_eval_prompt = 4;
  eval_options.log_passrate = true;
  eval_options.sampling.max_response_len = 6;
  MetricMap metrics = manager.evaluate({{"toy", eval.get()}}, eval_options).metrics;
  // With 0/1 rewards pass@1 is the mean reward; pass@k grows with k.
  EXPECT_NEAR(metrics.at("eval/toy/pass@1"), metrics.at("eval/toy"), 1e-12);
  EXPECT_LE(metrics.at("eval/toy/pass@1"), metrics.at("eval/toy/pass@2"));
  EXPECT_LE(metrics.at("eval/toy/pass@2"), metrics.at("eval/toy/pass@4"));
  EXPECT_EQ(metrics.count("eval/toy/pass@8"), 0u);
}

TEST_F(RolloutManagerTest, AFailingRewardFailsTheRolloutNamingSampleAndPlugin) {
  auto data = dataset(engines_->tokenizer(), 6, "failing.jsonl");
  PromptSource source(data);
  RewardOptions failing;
  failing.custom_rm_path = kPlugins + ":throws_on_sample_three";
  RewardModel rewards(failing);
  RolloutManager manager(options(2, 2, 4), source, engines_->router(), engines_->tokenizer(),
                         rewards);
  const std::string message =
      ooze::testing::error_message_of<PluginError>([&] { manager.generate(0); });
  EXPECT_CONTAINS(message, "sample 3");
  EXPECT_CONTAINS(message, "throws_on_sample_three");
  EXPECT_CONTAINS(message, "no label I can read");
  // Nothing is left running on the engines: the next rollout goes through.
  PromptSource next_source(data);
  RewardModel parity = parity_reward();
  RolloutManager next(options(2, 2, 4), next_source, engines_->router(), engines_->tokenizer(),
                      parity);
  EXPECT_EQ(next.generate(0).groups.size(), 2u);
}

// As ooze train --async does when the job fails while its generation thread is mid-rollout.
TEST(RolloutManagerCancelTest, CancelAbortsTheRolloutInFlightAndEveryLaterOne) {
  // One group at a time per engine: the rollout takes seconds, the cancel ends it at once.
  testing::ServedEngines engines(2, /*max_running_requests=*/4);
  auto data = dataset(engines.tokenizer(), 32, "cancelled.jsonl");
  PromptSource source(data);
  RewardModel rewards = parity_reward();
  RolloutManager manager(options(32, 4, 256), source, engines.router(), engines.tokenizer(),
                         rewards);
  auto running = [&] {
    int64_t sequences = 0;
    for (auto& engine : engines.engines()) {
      const engine::EngineStats stats = engine->stats();
      sequences += stats.running_sequences + stats.waiting_sequences;
    }
    return sequences;
  };
  std::string message = "no error";
  const auto start = std::chrono::steady_clock::now();
  std::thread generation([&] {
    try {
      manager.generate(0);
    } catch (const RolloutCancelled& error) {
      message = error.what();
    } catch (const std::exception& error) {
      message = std::string("another error: ") + error.what();
    }
  });
  while (running() == 0 && std::chrono::steady_clock::now() < start + std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto cancelled = std::chrono::steady_clock::now();
  manager.cancel();
  generation.join();
  std::printf("%s, %.2f s after the cancel\n", message.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - cancelled).count());
  EXPECT_LT(std::chrono::steady_clock::now() - cancelled, std::chrono::seconds(5));
  EXPECT_CONTAINS(message, "rollout cancelled with");
  EXPECT_EQ(message.find("128 of 128"), std::string::npos) << "the rollout ended before the cancel";
  EXPECT_EQ(running(), 0) << "the requests in flight were not aborted";
  EXPECT_CONTAINS(ooze::testing::error_message_of<RolloutCancelled>([&] { manager.generate(1); }),
                  "rollout cancelled before it started");
}

TEST(RolloutManagerNoEngineTest, NoLiveEngineFailsTheRolloutInsteadOfWaiting) {
  testing::ServedEngines engines(1);  // for the tokenizer and the data
  auto data = dataset(engines.tokenizer(), 4, "dead.jsonl");
  PromptSource source(data);
  RewardModel rewards = parity_reward();
  serving::RouterOptions dead;
  dead.engine_urls = {"http://127.0.0.1:" + std::to_string(ooze::testing::pick_free_port())};
  dead.health_check_interval_s = 3600;
  dead.connect_timeout_s = 1;
  serving::Router router(dead);
  RolloutManager manager(options(2, 2, 4), source, router, engines.tokenizer(), rewards);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_CONTAINS(ooze::testing::error_message_of<Error>([&] { manager.generate(0); }),
                  dead.engine_urls[0]);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(PassAtKTest, MatchesTheCombinatorialDefinition) {
  auto choose = [](int n, int k) {
    double c = 1;
    for (int i = 1; i <= k; ++i) c = c * (n - k + i) / i;
    return c;
  };
  for (int n = 1; n <= 12; ++n) {
    for (int c = 0; c <= n; ++c) {
      for (int k = 1; k <= n; ++k) {
        const double expected = n - c < k ? 1.0 : 1.0 - choose(n - c, k) / choose(n, k);
        EXPECT_NEAR(pass_at_k(n, c, k), expected, 1e-12) << n << " " << c << " " << k;
      }
    }
  }
}

TEST_F(RolloutManagerTest, BadPluginsAndContradictoryOptionsFailAtStartUp) {
  auto data = dataset(engines_->tokenizer(), 3, "bad.jsonl");
  PromptSource source(data);
  RewardModel rewards = parity_reward();
  RolloutOptions opts = options(1, 1, 4);
  opts.custom_generate_function_path = kPlugins + ":first_token_parity";  // a reward
  EXPECT_CONTAINS(ooze::testing::error_message_of<PluginError>([&] {
                    RolloutManager(opts, source, engines_->router(), engines_->tokenizer(),
                                   rewards);
                  }),
                  "--custom-generate-function-path");
  opts = options(1, 1, 4);
  opts.buffer_filter_path = kPlugins + ":first_token_parity";
  EXPECT_CONTAINS(ooze::testing::error_message_of<ConfigError>([&] {
                    RolloutManager(opts, source, engines_->router(), engines_->tokenizer(),
                                   rewards);
                  }),
                  "--partial-rollout");
}

}  // namespace rollout_manager_test
}  // namespace ooze::rollout
