// Python reward functions through RewardModel, as a run scores its groups: async rewards of a
// group really overlap on the hooks' event loop, sync ones on the reward threads, rewards come
// back in the samples' order however the calls finish, and each way a reward can fail names
// the hook, the sample and what was expected. The functions are tests/python/hooks/rewards.py.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "rollout/reward_model.h"
#include "tests/support/expect_error.h"

namespace ooze::rollout {
namespace python_reward_test {

using Clock = std::chrono::steady_clock;

const std::string kRewards = std::string(OOZE_TEST_HOOKS_DIR) + "/rewards.py:";

RewardModel python_reward(const std::string& function, bool group_rm = false,
                          int64_t reward_threads = 16) {
  RewardOptions options;
  options.custom_rm_path = kRewards + function;
  options.group_rm = group_rm;
  options.reward_threads = reward_threads;
  return RewardModel(options);
}

std::vector<Sample> group_of(int64_t size, int64_t group_index = 0) {
  std::vector<Sample> group(size);
  for (int64_t i = 0; i < size; ++i) {
    group[i].index = group_index * size + i;
    group[i].group_index = group_index;
    group[i].response = "answer " + std::to_string(i);
    group[i].label = "answer";
    group[i].status = Sample::Status::kCompleted;
  }
  return group;
}

double seconds_to_score(RewardModel& rewards, std::vector<Sample>& group) {
  const Clock::time_point start = Clock::now();
  rewards.score_group(group);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(PythonRewardTest, AsyncRewardsOfAGroupOverlap) {
  // 16 rewards that each sleep 0.2 s: 3.2 s one after the other. One reward thread only, so the
  // overlap is the event loop's.
  RewardModel rewards = python_reward("sleepy", false, /*reward_threads=*/1);
  std::vector<Sample> group = group_of(16);
  const double seconds = seconds_to_score(rewards, group);
  EXPECT_LT(seconds, 1.0);
  for (const Sample& sample : group) EXPECT_EQ(sample.reward, 1.0);
}

TEST(PythonRewardTest, SyncRewardsOverlapOnTheRewardThreads) {
  // time.sleep releases the GIL, as I/O does: 16 threads score 16 samples at once.
  RewardModel rewards = python_reward("sleepy_sync", false, /*reward_threads=*/16);
  std::vector<Sample> group = group_of(16);
  EXPECT_LT(seconds_to_score(rewards, group), 1.0);
  for (const Sample& sample : group) EXPECT_EQ(sample.reward, 1.0);
}

TEST(PythonRewardTest, RewardsComeBackInTheSamplesOrder) {
  RewardModel rewards = python_reward("shuffled_index");
  std::vector<std::vector<Sample>> groups = {group_of(8, 0), group_of(8, 1), group_of(8, 2)};
  rewards.score_rollout(groups);
  for (const std::vector<Sample>& group : groups) {
    for (const Sample& sample : group) EXPECT_EQ(sample.reward, sample.index);
  }
}

// sample.teacher_log_probs: the teacher's values when a distillation teacher scored the sample,
// None (Slime's default) when none did.
TEST(PythonRewardTest, HooksSeeTheTeachersLogProbs) {
  RewardModel rewards = python_reward("teacher_total");
  std::vector<Sample> group = group_of(2);
  group[0].teacher_log_probs = {-0.5f, -0.25f};
  rewards.score_group(group);
  EXPECT_EQ(group[0].reward, -0.75);
  EXPECT_EQ(group[1].reward, -1.0);
}

TEST(PythonRewardTest, AGroupRewardGetsTheGroupInOneCall) {
  RewardModel rewards = python_reward("rank_by_length", /*group_rm=*/true);
  std::vector<Sample> group = group_of(4);
  group[0].response = "the longest answer";
  group[2].response = "";
  rewards.score_group(group);
  EXPECT_EQ(group[0].reward, 1.0);
  EXPECT_EQ(group[2].reward, 0.0);
  EXPECT_DOUBLE_EQ(group[1].reward.get<double>() + group[3].reward.get<double>(), 1.0);
}

TEST(PythonRewardTest, AFailureNamesTheHookTheSampleAndWhatWasExpected) {
  const auto failure_of = [](const std::string& function, bool group_rm = false) {
    RewardModel rewards = python_reward(function, group_rm);
    std::vector<Sample> group = group_of(4);
    return ::ooze::testing::error_message_of<RewardError>([&] { rewards.score_group(group); });
  };
  std::string message = failure_of("raises_on_third");
  EXPECT_CONTAINS(message, "--custom-rm-path " + kRewards +
                               "raises_on_third raised on sample 2 "
                               "(group 0):\nTraceback");
  EXPECT_CONTAINS(message, "rewards.py\", line");
  EXPECT_CONTAINS(message, "ValueError: cannot grade 'answer 2'");

  message = failure_of("raises_async");
  EXPECT_CONTAINS(message, "raises_async raised on sample 0");
  EXPECT_CONTAINS(message, "RuntimeError: the judge is down");

  message = failure_of("returns_str");
  EXPECT_CONTAINS(message,
                  "on sample 0 (group 0) returned a str ('0.5'), but a reward is a "
                  "number or a dict of them");
  message = failure_of("returns_nan");
  EXPECT_CONTAINS(message, "returned nan, but a reward must be a finite number");
  message = failure_of("wrong_length", /*group_rm=*/true);
  EXPECT_CONTAINS(message, "returned 1 values for 4 samples (one reward each)");
}

TEST(PythonRewardTest, GroupRmChecksTheBatchedSignatureAtStartUp) {
  const std::string message = ::ooze::testing::error_message_of<python::HookError>(
      [] { python_reward("one_argument", /*group_rm=*/true); });
  EXPECT_CONTAINS(message, "one_argument(args, samples)");
}

}  // namespace python_reward_test
}  // namespace ooze::rollout
