// The uniform-reward warning: once per streak of rollouts whose samples all got one reward, and
// naming only the causes the samples show.
#include "rollout/uniform_reward_watch.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "tests/support/expect_error.h"

namespace ooze::rollout {
namespace uniform_reward_watch_test {

using Groups = std::vector<std::vector<Sample>>;

struct Shape {
  double reward = 0;
  int64_t length = 5;
  Sample::Status status = Sample::Status::kCompleted;
  std::string label = "4";
};

// Two groups of two samples shaped alike, with one different reward when `odd` is set.
Groups rollout_of(const Shape& shape, std::optional<double> odd = std::nullopt) {
  Groups groups(2, std::vector<Sample>(2));
  for (std::vector<Sample>& group : groups) {
    for (Sample& sample : group) {
      sample.reward = shape.reward;
      sample.response_length = shape.length;
      sample.status = shape.status;
      sample.label = shape.label;
    }
  }
  if (odd) groups[1][1].reward = *odd;
  return groups;
}

GenerationStats outputs(int64_t finished, int64_t on_stop_string = 0, int64_t on_stop_token = 0) {
  GenerationStats stats;
  stats.finished_outputs = finished;
  stats.stopped_on_stop_string = on_stop_string;
  stats.stopped_on_stop_token = on_stop_token;
  return stats;
}

RolloutSampling sampling(int64_t max_response_len) {
  RolloutSampling sampling;
  sampling.max_response_len = max_response_len;
  return sampling;
}

TEST(UniformRewardWatch, WarnsOncePerStreak) {
  UniformRewardWatch watch(sampling(8), "--rm-type math", "");
  const Shape zero{0, 8, Sample::Status::kTruncated};
  std::vector<int64_t> warned_at;
  // Streak 0-3, broken at 4 by differing rewards, streak 5-9.
  for (int64_t id = 0; id < 10; ++id) {
    const Groups groups = id == 4 ? rollout_of(zero, 1.0) : rollout_of(zero);
    if (watch.observe(id, groups, outputs(4))) warned_at.push_back(id);
  }
  EXPECT_EQ(warned_at, (std::vector<int64_t>{2, 7}));
}

TEST(UniformRewardWatch, NamesTruncationWhenEveryResponseHitTheLimit) {
  UniformRewardWatch watch(sampling(8), "--rm-type math", "");
  std::optional<std::string> warning;
  for (int64_t id = 3; id < 6; ++id) {
    warning = watch.observe(id, rollout_of({0, 8, Sample::Status::kTruncated}), outputs(4));
  }
  ASSERT_TRUE(warning);
  EXPECT_CONTAINS(*warning, "rollouts 3 to 5");
  EXPECT_CONTAINS(*warning, "(0, --rm-type math)");
  EXPECT_CONTAINS(*warning, "every response was cut at --rollout-max-response-len 8");
  EXPECT_EQ(warning->find("label"), std::string::npos) << *warning;
  EXPECT_EQ(warning->find("--rollout-stop"), std::string::npos) << *warning;
}

TEST(UniformRewardWatch, NamesAStopStringThatEndsEveryResponse) {
  RolloutSampling stop = sampling(64);
  stop.stop = {"\n"};
  UniformRewardWatch watch(stop, "--rm-type math", "");
  std::optional<std::string> warning;
  for (int64_t id = 0; id < 3; ++id) {
    warning = watch.observe(id, rollout_of({0, 3}), outputs(4, 4));
  }
  ASSERT_TRUE(warning);
  EXPECT_CONTAINS(*warning, "every response ended on a --rollout-stop string [\"\\n\"]");
  EXPECT_CONTAINS(*warning, "exactly 3 tokens");
  EXPECT_EQ(warning->find("cut at"), std::string::npos) << *warning;

  RolloutSampling token = sampling(64);
  token.stop_token_ids = {13};
  UniformRewardWatch token_watch(token, "--rm-type f1", "");
  for (int64_t id = 0; id < 3; ++id) {
    warning = token_watch.observe(id, rollout_of({0, 2 + id}), outputs(4, 0, 4));
  }
  ASSERT_TRUE(warning);
  EXPECT_CONTAINS(*warning, "--rollout-stop-token-ids token [13], after at most 4 tokens");
}

TEST(UniformRewardWatch, NamesEmptyLabelsAndSameLengthAnswers) {
  UniformRewardWatch watch(sampling(64), "--custom-rm-path my.reward", "");
  std::optional<std::string> warning;
  for (int64_t id = 0; id < 3; ++id) {
    warning = watch.observe(id, rollout_of({1, 7, Sample::Status::kCompleted, ""}), outputs(4));
  }
  ASSERT_TRUE(warning);
  EXPECT_CONTAINS(*warning, "(1, --custom-rm-path my.reward)");
  EXPECT_CONTAINS(*warning, "every sample's label is empty");
  EXPECT_CONTAINS(*warning, "every response is exactly 7 tokens long");
}

TEST(UniformRewardWatch, SaysWhenTheSamplesShowNoCause) {
  UniformRewardWatch watch(sampling(64), "--rm-type math", "");
  std::optional<std::string> warning;
  for (int64_t id = 0; id < 3; ++id) {
    Groups groups = rollout_of({0, 10});
    groups[0][0].response_length = 30;  // lengths vary, nothing truncated, no stop matched
    warning = watch.observe(id, groups, outputs(4));
  }
  ASSERT_TRUE(warning);
  EXPECT_CONTAINS(*warning, "show no label missing, no stop cutting every answer and 0 of 12");
  EXPECT_EQ(warning->find("likely cause"), std::string::npos) << *warning;
}

TEST(UniformRewardWatch, ObjectRewardsUseTheRewardKey) {
  UniformRewardWatch watch(sampling(8), "--rm-type dapo", "score");
  Groups groups = rollout_of({});
  for (std::vector<Sample>& group : groups) {
    for (Sample& sample : group) sample.reward = {{"score", -1.0}, {"acc", 0.0}, {"pred", "x"}};
  }
  std::optional<std::string> warning;
  for (int64_t id = 0; id < 3; ++id) warning = watch.observe(id, groups, outputs(4));
  ASSERT_TRUE(warning);
  EXPECT_CONTAINS(*warning, "(-1, --rm-type dapo)");
  // Without the key the scalar is unknown: no streak.
  UniformRewardWatch keyless(sampling(8), "--rm-type dapo", "");
  for (int64_t id = 0; id < 3; ++id) EXPECT_FALSE(keyless.observe(id, groups, outputs(4)));
}

}  // namespace uniform_reward_watch_test
}  // namespace ooze::rollout
