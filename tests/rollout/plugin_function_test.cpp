// PluginFunction against real plugin libraries built by the test build (tests/rollout/plugins):
// every kind loads and runs, failures name the plugin and the sample, bad specs are refused at
// load, and calls from many threads each get their own answer.
#include "rollout/plugin_function.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/expect_error.h"

#ifndef OOZE_TEST_PLUGINS
#error "OOZE_TEST_PLUGINS (the test plugins' library) must be defined by the build"
#endif
#ifndef OOZE_WRONG_ABI_PLUGIN
#error "OOZE_WRONG_ABI_PLUGIN must be defined by the build"
#endif

namespace ooze::rollout {
namespace plugin_function_test {

using ooze::testing::error_message_of;
using plugin::Kind;

const std::string kPlugins = OOZE_TEST_PLUGINS;
const std::string kWrongAbiPlugin = OOZE_WRONG_ABI_PLUGIN;

std::string spec_of(const std::string& function) { return kPlugins + ":" + function; }

PluginFunction load(const std::string& function, Kind kind, const std::string& flag = "--flag") {
  return PluginFunction::load(spec_of(function), kind, flag);
}

Sample make_sample(int64_t index, int64_t group_index, const std::string& response,
                   const std::string& label = "") {
  Sample sample;
  sample.index = index;
  sample.group_index = group_index;
  sample.prompt = "What is 6 * 7?";
  sample.response = response;
  sample.label = label;
  return sample;
}

// ---- each kind loads and runs ----

TEST(PluginFunction, RewardFunctionsReturnNumbersAndObjects) {
  const PluginFunction length = load("response_length", Kind::kReward, "--custom-rm-path");
  EXPECT_EQ(length.kind(), Kind::kReward);
  EXPECT_EQ(length.spec(), spec_of("response_length"));
  EXPECT_EQ(length.flag(), "--custom-rm-path");
  EXPECT_EQ(length.reward(make_sample(0, 0, "forty-two")), nlohmann::json(9.0));
  EXPECT_EQ(length.reward(make_sample(1, 0, "")), nlohmann::json(0.0));

  const PluginFunction graded = load("graded_answer", Kind::kReward);
  const nlohmann::json right = graded.reward(make_sample(2, 1, "the answer is 42", "42"));
  const nlohmann::json wrong = graded.reward(make_sample(3, 1, "the answer is 41", "42"));
  EXPECT_EQ(right, (nlohmann::json{{"score", 1.0}, {"label", "42"}}));
  EXPECT_EQ(wrong.at("score"), 0.0);
  Sample scored = make_sample(4, 1, "42", "42");
  scored.reward = graded.reward(scored);
  EXPECT_EQ(scored.reward_value("score"), 1.0);
}

TEST(PluginFunction, BatchedRewardGivesOneRewardPerSampleInOrder) {
  const PluginFunction rank = load("rank_by_length", Kind::kBatchedReward, "--custom-rm-path");
  const std::vector<Sample> samples = {make_sample(0, 0, "ccc"), make_sample(1, 0, "a"),
                                       make_sample(2, 0, "dddd"), make_sample(3, 0, "bb")};
  const std::vector<nlohmann::json> rewards = rank.batched_reward(samples);
  EXPECT_EQ(rewards, (std::vector<nlohmann::json>{2, 0, 3, 1}));
  EXPECT_TRUE(rank.batched_reward({}).empty());
}

TEST(PluginFunction, BatchedRewardWithTheWrongCountIsAnError) {
  const PluginFunction short_by_one =
      load("one_reward_short", Kind::kBatchedReward, "--custom-rm-path");
  const std::vector<Sample> samples = {make_sample(8, 2, "x"), make_sample(9, 2, "y"),
                                       make_sample(10, 3, "z")};
  const std::string message =
      error_message_of<PluginError>([&] { short_by_one.batched_reward(samples); });
  EXPECT_CONTAINS(message, "--custom-rm-path " + spec_of("one_reward_short"));
  EXPECT_CONTAINS(message, "returned 2 rewards for a batch of 3 samples (groups 2..3)");
  EXPECT_CONTAINS(message, "one reward per sample");
}

TEST(PluginFunction, GroupFilterKeepsOrDropsWithAReason) {
  const PluginFunction filter =
      load("keep_mixed_rewards", Kind::kGroupFilter, "--dynamic-sampling-filter-path");
  std::vector<Sample> group = {make_sample(0, 5, "a"), make_sample(1, 5, "b")};
  group[0].reward = 1.0;
  group[1].reward = 0.0;
  const plugin::FilterDecision mixed = filter.filter_group(group);
  EXPECT_TRUE(mixed.keep);
  EXPECT_EQ(mixed.reason, "");
  group[1].reward = 1.0;
  const plugin::FilterDecision same = filter.filter_group(group);
  EXPECT_FALSE(same.keep);
  EXPECT_EQ(same.reason, "all rewards equal");
}

TEST(PluginFunction, GroupFilterFailureNamesTheGroup) {
  const PluginFunction filter =
      load("needs_four_samples", Kind::kGroupFilter, "--dynamic-sampling-filter-path");
  const std::vector<Sample> group = {make_sample(21, 7, "a"), make_sample(22, 7, "b")};
  const std::string message = error_message_of<PluginError>([&] { filter.filter_group(group); });
  EXPECT_CONTAINS(message, "--dynamic-sampling-filter-path " + spec_of("needs_four_samples"));
  EXPECT_CONTAINS(message, "failed on group 7 (2 samples)");
  EXPECT_CONTAINS(message, "expected 4 samples per group, got 2");

  // A filter that reads a missing reward: the Sample's own error reaches the user through it.
  const PluginFunction mixed = load("keep_mixed_rewards", Kind::kGroupFilter);
  const std::string unscored = error_message_of<PluginError>([&] { mixed.filter_group(group); });
  EXPECT_CONTAINS(unscored, "sample 21 (group 7) has no reward yet");
}

TEST(PluginFunction, BufferFilterTakesGroupsAndLeavesTheRest) {
  const PluginFunction filter =
      load("take_newest_groups", Kind::kBufferFilter, "--buffer-filter-path");
  std::vector<std::vector<Sample>> buffer;
  for (int64_t group = 0; group < 5; ++group) {
    buffer.push_back({make_sample(2 * group, group, "a"), make_sample(2 * group + 1, group, "b")});
  }
  const std::vector<std::vector<Sample>> taken = filter.filter_buffer(buffer, 2);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].at(0).group_index, 4);
  EXPECT_EQ(taken[1].at(1).index, 7);
  ASSERT_EQ(buffer.size(), 3u);
  EXPECT_EQ(buffer.back().front().group_index, 2);
  EXPECT_EQ(filter.filter_buffer(buffer, 10).size(), 3u);
  EXPECT_TRUE(buffer.empty());
}

TEST(PluginFunction, BufferFilterTakingMoreThanAskedIsAnError) {
  const PluginFunction greedy =
      load("take_everything", Kind::kBufferFilter, "--buffer-filter-path");
  std::vector<std::vector<Sample>> buffer(4, std::vector<Sample>{make_sample(0, 0, "a")});
  const std::string message =
      error_message_of<PluginError>([&] { greedy.filter_buffer(buffer, 3); });
  EXPECT_CONTAINS(message, "--buffer-filter-path " + spec_of("take_everything"));
  EXPECT_CONTAINS(message, "returned 4 groups from a buffer of 4 groups (asked for 3)");
}

// An engine stand-in: what the rollout manager's context does to a sample, in miniature (one
// token per character; policy tokens 1000 + i).
class CountingContext : public plugin::GenerationContext {
 public:
  explicit CountingContext(int64_t budget) : budget_(budget) {}

  std::string generate(Sample& sample, int64_t max_new_tokens) override {
    int64_t count = remaining_budget(sample);
    if (max_new_tokens > 0) count = std::min(count, max_new_tokens);
    std::string text;
    for (int64_t i = 0; i < count; ++i) {
      sample.tokens.push_back(1000 + i);
      sample.loss_mask.push_back(1);
      sample.rollout_log_probs.push_back(-0.5f);
      sample.weight_versions.push_back(7);
      text += static_cast<char>('a' + i % 26);
    }
    sample.response += text;
    sample.response_length += count;
    ++generate_calls;
    sample.status =
        remaining_budget(sample) == 0 ? Sample::Status::kTruncated : Sample::Status::kCompleted;
    return text;
  }

  int64_t append_observation(Sample& sample, const std::string& text) override {
    const int64_t count = std::min<int64_t>(remaining_budget(sample), text.size());
    for (int64_t i = 0; i < count; ++i) {
      sample.tokens.push_back(text[i]);
      sample.loss_mask.push_back(0);
      sample.rollout_log_probs.push_back(0.0f);
      sample.weight_versions.push_back(-1);
    }
    sample.response += text.substr(0, count);
    sample.response_length += count;
    return count;
  }

  int64_t remaining_budget(const Sample& sample) const override {
    return budget_ - sample.response_length;
  }
  std::vector<int64_t> tokenize(const std::string& text) const override {
    return std::vector<int64_t>(text.begin(), text.end());
  }
  std::string detokenize(const std::vector<int64_t>& ids) const override {
    return std::string(ids.begin(), ids.end());
  }

  int generate_calls = 0;

 private:
  int64_t budget_;
};

TEST(PluginFunction, GenerateFunctionDrivesTheContext) {
  const PluginFunction generate =
      load("answer_with_tool", Kind::kGenerate, "--custom-generate-function-path");
  CountingContext context(/*budget=*/20);
  Sample sample = make_sample(3, 1, "");
  sample.tokens = {1, 2, 3, 4};
  generate.generate(context, sample);

  EXPECT_EQ(context.generate_calls, 2);
  // 3 policy tokens "abc", the 16-token tool answer (17 left), then the last policy token.
  EXPECT_EQ(sample.response.substr(0, 3), "abc");
  EXPECT_EQ(sample.response.substr(3, 16), "<tool>abc</tool>");
  EXPECT_EQ(sample.response_length, 20);
  EXPECT_EQ(sample.prompt_length(), 4);
  ASSERT_EQ(sample.loss_mask.size(), 20u);
  EXPECT_EQ(std::count(sample.loss_mask.begin(), sample.loss_mask.end(), 0), 16);
  EXPECT_EQ(sample.weight_versions[3], -1);
  EXPECT_EQ(sample.weight_versions[19], 7);
  EXPECT_EQ(sample.status, Sample::Status::kTruncated);
  EXPECT_EQ(sample.metrics.at("turns"), 2);
  EXPECT_EQ(sample.metrics.at("observation_tokens"), 16);
}

TEST(PluginFunction, GenerateFailureNamesTheSampleAndKeepsWhatWasGenerated) {
  const PluginFunction generate =
      load("tool_unreachable", Kind::kGenerate, "--custom-generate-function-path");
  CountingContext context(8);
  Sample sample = make_sample(12, 3, "");
  const std::string message =
      error_message_of<PluginError>([&] { generate.generate(context, sample); });
  EXPECT_CONTAINS(message, "--custom-generate-function-path " + spec_of("tool_unreachable"));
  EXPECT_CONTAINS(message, "failed on sample 12 (group 3)");
  EXPECT_CONTAINS(message, "the search tool at 127.0.0.1:9 is unreachable");
  EXPECT_EQ(sample.response_length, 1);
}

// ---- failures while scoring ----

TEST(PluginFunction, ThrowingRewardNamesTheSampleAndThePlugin) {
  const PluginFunction reward = load("needs_label", Kind::kReward, "--custom-rm-path");
  EXPECT_EQ(reward.reward(make_sample(0, 0, "x", "42")), 1.0);
  const std::string message =
      error_message_of<PluginError>([&] { reward.reward(make_sample(17, 4, "x")); });
  EXPECT_EQ(message, "--custom-rm-path " + spec_of("needs_label") +
                         " failed on sample 17 (group 4): the sample has no label to compare with");

  const PluginFunction int_thrower = load("throws_an_int", Kind::kReward, "--custom-rm-path");
  const std::string odd =
      error_message_of<PluginError>([&] { int_thrower.reward(make_sample(5, 2, "x")); });
  EXPECT_CONTAINS(odd, "failed on sample 5 (group 2)");
  EXPECT_CONTAINS(odd, "not a std::exception");
}

TEST(PluginFunction, CallingAFunctionAsAnotherKindIsRefused) {
  const PluginFunction reward = load("response_length", Kind::kReward, "--custom-rm-path");
  std::vector<std::vector<Sample>> buffer;
  const std::string message =
      error_message_of<PluginError>([&] { reward.filter_buffer(buffer, 1); });
  EXPECT_CONTAINS(message, "is a reward function; PluginFunction::filter_buffer calls a buffer");
}

// ---- refused at load ----

TEST(PluginFunction, SpecWithoutFunctionIsRefused) {
  std::string message = error_message_of<PluginError>(
      [&] { PluginFunction::load(kPlugins, Kind::kReward, "--custom-rm-path"); });
  EXPECT_CONTAINS(message, "--custom-rm-path");
  EXPECT_CONTAINS(message, "give path/to/lib.so:function");

  message = error_message_of<PluginError>(
      [&] { PluginFunction::load(kPlugins + ":", Kind::kReward, "--custom-rm-path"); });
  EXPECT_CONTAINS(message, "is not a function name");
  message = error_message_of<PluginError>(
      [&] { PluginFunction::load(":reward", Kind::kReward, "--custom-rm-path"); });
  EXPECT_CONTAINS(message, "names no library");
}

TEST(PluginFunction, MissingLibraryIsRefused) {
  const std::string spec = "/nonexistent/dir/libreward.so:score";
  const std::string message = error_message_of<PluginError>(
      [&] { PluginFunction::load(spec, Kind::kReward, "--custom-rm-path"); });
  EXPECT_CONTAINS(message, "--custom-rm-path " + spec);
  EXPECT_CONTAINS(message, "/nonexistent/dir/libreward.so does not exist");
}

TEST(PluginFunction, FileThatIsNotALibraryGivesTheLoadersError) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("ooze_not_a_library_" + std::to_string(::getpid()) + ".so");
  std::ofstream(path) << "this is text, not ELF\n";
  const std::string message = error_message_of<PluginError>(
      [&] { PluginFunction::load(path.string() + ":score", Kind::kReward, "--custom-rm-path"); });
  std::filesystem::remove(path);
  EXPECT_CONTAINS(message, "cannot load the library");
  EXPECT_CONTAINS(message, path.string());  // dlerror names the file
}

TEST(PluginFunction, MissingFunctionSaysToExportItWithTheMacroOfItsKind) {
  const std::string message = error_message_of<PluginError>(
      [&] { load("no_such_function", Kind::kGroupFilter, "--dynamic-sampling-filter-path"); });
  EXPECT_CONTAINS(message, "--dynamic-sampling-filter-path " + spec_of("no_such_function"));
  EXPECT_CONTAINS(message, "exports no plugin function 'no_such_function'");
  EXPECT_CONTAINS(message, "ooze_plugin_info_no_such_function");
  EXPECT_CONTAINS(message, "OOZE_EXPORT_GROUP_FILTER(no_such_function)");
}

TEST(PluginFunction, FunctionNotExportedWithTheMacroIsRefused) {
  const std::string message =
      error_message_of<PluginError>([&] { load("plain_function", Kind::kReward); });
  EXPECT_CONTAINS(message, "has a plain symbol 'plain_function'");
  EXPECT_CONTAINS(message, "OOZE_EXPORT_REWARD(plain_function)");
}

TEST(PluginFunction, FunctionOfAnotherKindIsRefusedNamingBothKinds) {
  const std::string message = error_message_of<PluginError>(
      [&] { load("keep_mixed_rewards", Kind::kReward, "--custom-rm-path"); });
  EXPECT_CONTAINS(message, "'keep_mixed_rewards' is a group filter");
  EXPECT_CONTAINS(message, "OOZE_EXPORT_GROUP_FILTER");
  EXPECT_CONTAINS(message, "--custom-rm-path takes a reward function");

  const std::string batched = error_message_of<PluginError>(
      [&] { load("response_length", Kind::kBatchedReward, "--custom-rm-path"); });
  EXPECT_CONTAINS(batched, "is a reward function");
  EXPECT_CONTAINS(batched, "takes a batched reward function");
}

TEST(PluginFunction, FlagTakingSeveralKindsLoadsAnyOfThemAndNamesThemAll) {
  const std::vector<Kind> rewards = {Kind::kReward, Kind::kBatchedReward};
  const PluginFunction single =
      PluginFunction::load_any(spec_of("response_length"), rewards, "--custom-rm-path");
  EXPECT_EQ(single.kind(), Kind::kReward);
  EXPECT_EQ(single.reward(make_sample(0, 0, "abc")), 3.0);
  const PluginFunction batched =
      PluginFunction::load_any(spec_of("rank_by_length"), rewards, "--custom-rm-path");
  EXPECT_EQ(batched.kind(), Kind::kBatchedReward);

  const std::string message = error_message_of<PluginError>(
      [&] { PluginFunction::load_any(spec_of("take_everything"), rewards, "--custom-rm-path"); });
  EXPECT_CONTAINS(message, "'take_everything' is a buffer filter");
  EXPECT_CONTAINS(message, "OOZE_EXPORT_REWARD(take_everything)) or a batched reward function");
  const std::string missing = error_message_of<PluginError>(
      [&] { PluginFunction::load_any(spec_of("nothing"), rewards, "--custom-rm-path"); });
  EXPECT_CONTAINS(missing, "OOZE_EXPORT_REWARD(nothing) or OOZE_EXPORT_BATCHED_REWARD(nothing)");
}

TEST(PluginFunction, PluginOfAnotherAbiVersionIsRefused) {
  const std::string message = error_message_of<PluginError>([&] {
    PluginFunction::load(kWrongAbiPlugin + ":future_reward", Kind::kReward, "--custom-rm-path");
  });
  EXPECT_CONTAINS(message, "built against plugin ABI version 999");
  EXPECT_CONTAINS(message, "this ooze uses version " + std::to_string(plugin::kAbiVersion));
  EXPECT_CONTAINS(message, "Rebuild the plugin");
}

// ---- one library per path; many threads ----

TEST(PluginFunction, LoadingTheSameLibraryTwiceSharesItsState) {
  const PluginFunction first = load("count_calls", Kind::kReward);
  const PluginFunction second = load("count_calls", Kind::kReward);
  const int64_t before = first.reward(make_sample(0, 0, "a")).at("call");
  EXPECT_EQ(second.reward(make_sample(1, 0, "b")).at("call"), before + 1);
  EXPECT_EQ(first.reward(make_sample(2, 0, "c")).at("call"), before + 2);
}

TEST(PluginFunction, ConcurrentLoadsAndCallsEachGetTheirOwnAnswer) {
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 400;
  std::vector<std::vector<nlohmann::json>> answers(kThreads);
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        const PluginFunction counter = load("count_calls", Kind::kReward);
        const PluginFunction length = load("response_length", Kind::kReward);
        for (int i = 0; i < kCallsPerThread; ++i) {
          const int64_t index = t * kCallsPerThread + i;
          const Sample sample = make_sample(index, t, std::string(index % 97, 'x'));
          nlohmann::json answer = counter.reward(sample);
          answer["length"] = length.reward(sample);
          answers[t].push_back(std::move(answer));
        }
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::set<int64_t> call_numbers;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(failures[t], "") << "thread " << t;
    ASSERT_EQ(answers[t].size(), static_cast<size_t>(kCallsPerThread));
    for (int i = 0; i < kCallsPerThread; ++i) {
      const int64_t index = t * kCallsPerThread + i;
      const nlohmann::json& answer = answers[t][i];
      EXPECT_EQ(answer.at("index"), index);
      EXPECT_EQ(answer.at("response"), std::string(index % 97, 'x'));
      EXPECT_EQ(answer.at("length"), static_cast<double>(index % 97));
      call_numbers.insert(answer.at("call").get<int64_t>());
    }
  }
  // Every call ran exactly once: the counter took kThreads * kCallsPerThread distinct values.
  ASSERT_EQ(call_numbers.size(), static_cast<size_t>(kThreads * kCallsPerThread));
  EXPECT_EQ(*call_numbers.rbegin() - *call_numbers.begin() + 1, kThreads * kCallsPerThread);
}

}  // namespace plugin_function_test
}  // namespace ooze::rollout
