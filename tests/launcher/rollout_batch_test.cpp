// A rollout made ready for training: the samples' layout for the trainer, and the advantages of
// the estimators against computations written out here in plain doubles.
#include "launcher/rollout_batch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/launcher/made_samples.h"
#include "tests/support/expect_error.h"
#include "tests/support/tiny_model.h"

namespace ooze::launcher {
namespace rollout_batch_test {

using ooze::testing::error_message_of;

using ::ooze::testing::make_sample;

// Two groups of three: rewards {1, 0, 0} and {1, 1, 0}; response lengths 2..4.
std::vector<std::vector<rollout::Sample>> two_groups() {
  return {{make_sample(0, 0, 2, 1.0), make_sample(0, 1, 3, 0.0, true), make_sample(0, 2, 4, 0.0)},
          {make_sample(1, 3, 4, 1.0), make_sample(1, 4, 2, 1.0), make_sample(1, 5, 3, 0.0, true)}};
}

std::vector<double> values_of(const at::Tensor& tensor) {
  const at::Tensor t = tensor.to(at::kDouble).contiguous();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

TEST(RolloutBatch, SamplesKeepTheirTokensMasksAndRolloutLogProbsGroupAfterGroup) {
  const auto groups = two_groups();
  const RolloutBatch batch = rollout_batch(groups);
  ASSERT_EQ(batch.samples.size(), 6u);
  EXPECT_EQ(batch.group_size, 3);
  EXPECT_EQ(batch.rewards, (std::vector<double>{1, 0, 0, 1, 1, 0}));
  const fsdp::PackingSample& tool = batch.samples[1];
  EXPECT_EQ(tool.response_length, 3);
  EXPECT_TRUE(at::equal(tool.tokens, at::tensor(groups[0][1].tokens, at::kLong)));
  EXPECT_EQ(values_of(tool.response_mask), (std::vector<double>{1, 1, 0}));
  const std::vector<double> log_probs = values_of(tool.response_values.at("rollout_log_probs"));
  ASSERT_EQ(log_probs.size(), 3u);
  EXPECT_NEAR(log_probs[1], -0.2, 1e-7);
  EXPECT_EQ(log_probs[2], 0.0);
}

TEST(RolloutBatch, SelfDistillationsTeacherReadsThePromptThenThePrivilegedField) {
  const models::Tokenizer tokenizer = models::load_tokenizer(testing::tiny_model_dir());
  auto groups = two_groups();
  for (auto& group : groups) {
    for (rollout::Sample& sample : group) {
      sample.label = "label " + std::to_string(sample.index);
      sample.metadata = {{"solution", "x = " + std::to_string(sample.index)}, {"steps", {1, 2}}};
    }
  }
  const auto expect_teacher_prompts = [&](const std::string& key, const auto& text_of) {
    RolloutBatch batch = rollout_batch(groups);
    add_privileged_prompts(batch, groups, key, tokenizer);
    for (size_t i = 0; i < 6; ++i) {
      const rollout::Sample& sample = groups[i / 3][i % 3];
      std::vector<int64_t> expected = {1, 2, 3};  // the prompt
      for (int64_t token : tokenizer.encode(text_of(sample))) expected.push_back(token);
      EXPECT_TRUE(at::equal(batch.samples[i].teacher_prompt, at::tensor(expected, at::kLong)))
          << key << ", sample " << i;
      // The student's own tokens are untouched.
      EXPECT_TRUE(at::equal(batch.samples[i].tokens, at::tensor(sample.tokens, at::kLong)));
    }
  };
  expect_teacher_prompts("label", [](const rollout::Sample& s) { return s.label; });
  expect_teacher_prompts("solution", [](const rollout::Sample& s) {
    return s.metadata["solution"].get<std::string>();
  });
  expect_teacher_prompts("steps", [](const rollout::Sample&) { return std::string("[1,2]"); });

  RolloutBatch batch = rollout_batch(groups);
  groups[1][2].metadata.erase("solution");
  EXPECT_CONTAINS(
      error_message_of<Error>(
          [&] { add_privileged_prompts(batch, groups, "solution", tokenizer); }),
      "--opsd-privileged-info-key solution: sample 2 of group 1 has no label by that name nor a "
      "'solution' field in its metadata");
}

TEST(RolloutBatch, GrpoAdvantagesAreTheGroupNormalisedRewardOnEveryToken) {
  RolloutBatch batch = rollout_batch(two_groups());
  compute_advantages(batch, algorithms::AdvantageOptions{}, algorithms::KlEstimator::kK1);
  const std::vector<at::Tensor> advantages = batch.get("advantages");
  for (size_t i = 0; i < 6; ++i) {
    const size_t first = i / 3 * 3;
    double mean = 0;
    for (size_t j = first; j < first + 3; ++j) mean += batch.rewards[j] / 3;
    double variance = 0;
    for (size_t j = first; j < first + 3; ++j) variance += std::pow(batch.rewards[j] - mean, 2) / 2;
    const double expected = (batch.rewards[i] - mean) / (std::sqrt(variance) + 1e-6);
    for (double value : values_of(advantages[i])) EXPECT_NEAR(value, expected, 1e-5) << i;
  }
  // For grpo the returns are the advantages.
  EXPECT_TRUE(at::equal(batch.get("returns")[4], advantages[4]));
}

// REINFORCE++: token rewards -kl_coef * KL_t on counted tokens (k1: old - ref), the reward on the
// last counted token, advantages the undiscounted returns, whitened over the counted tokens.
TEST(RolloutBatch, ReinforcePlusPlusShapesRewardsWithTheKlAndWhitens) {
  RolloutBatch batch = rollout_batch(two_groups());
  std::vector<at::Tensor> old, ref;
  for (const fsdp::PackingSample& sample : batch.samples) {
    old.push_back(at::linspace(-1.0, -0.5, sample.response_length, at::kFloat));
    ref.push_back(at::linspace(-0.8, -0.9, sample.response_length, at::kFloat));
  }
  batch.set("old_log_probs", old);
  batch.set("ref_log_probs", ref);
  algorithms::AdvantageOptions options;
  options.estimator = algorithms::AdvantageEstimator::kReinforcePlusPlus;
  options.kl_coef = 0.1;
  compute_advantages(batch, options, algorithms::KlEstimator::kK1);

  std::vector<std::vector<double>> expected;
  double sum = 0, sum_of_squares = 0, count = 0;
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const std::vector<double> o = values_of(old[i]), r = values_of(ref[i]);
    const std::vector<double> mask = values_of(batch.samples[i].response_mask);
    std::vector<double> token_rewards(o.size());
    size_t last_counted = 0;
    for (size_t t = 0; t < o.size(); ++t) {
      token_rewards[t] = -0.1 * mask[t] * (o[t] - r[t]);
      if (mask[t] == 1) last_counted = t;
    }
    token_rewards[last_counted] += batch.rewards[i];
    std::vector<double> returns(o.size());
    double running = 0;
    for (size_t t = o.size(); t-- > 0;) returns[t] = running += token_rewards[t];
    for (size_t t = 0; t < o.size(); ++t) {
      sum += returns[t] * mask[t];
      sum_of_squares += returns[t] * returns[t] * mask[t];
      count += mask[t];
    }
    expected.push_back(returns);
  }
  const double mean = sum / count;
  const double variance = (sum_of_squares - count * mean * mean) / (count - 1);
  const std::vector<at::Tensor> advantages = batch.get("advantages");
  for (size_t i = 0; i < expected.size(); ++i) {
    const std::vector<double> got = values_of(advantages[i]);
    ASSERT_EQ(got.size(), expected[i].size());
    for (size_t t = 0; t < got.size(); ++t) {
      EXPECT_NEAR(got[t], (expected[i][t] - mean) / std::sqrt(variance + 1e-8), 1e-4)
          << "sample " << i << " token " << t;
    }
  }
}

TEST(RolloutBatch, GlobalBatchesDealTheSamplesInOrder) {
  const RolloutBatch batch = rollout_batch(two_groups());
  const std::vector<trainer::TrainBatch> steps = batch.global_batches(3);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_TRUE(at::equal(steps[1].samples[0].tokens, batch.samples[3].tokens));
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { batch.global_batches(4); }),
                  "--global-batch-size 4 does not divide the 6 samples");
}

// ppo: GAE over the critic's values, the reward on the last counted token, written out as the
// textbook's backward recursion in doubles; the critic's targets are advantages + values.
TEST(RolloutBatch, PpoTakesGaeOverTheCriticsValues) {
  RolloutBatch batch = rollout_batch(two_groups());
  std::vector<at::Tensor> critic_values;
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const int64_t length = batch.samples[i].response_length;
    critic_values.push_back(at::arange(length, at::kFloat) * 0.1f + 0.05f * static_cast<float>(i));
  }
  batch.set("values", critic_values);
  algorithms::AdvantageOptions ppo;
  ppo.estimator = algorithms::AdvantageEstimator::kPpo;
  ppo.gamma = 0.9;
  ppo.lambd = 0.8;
  compute_advantages(batch, ppo, algorithms::KlEstimator::kK1);
  const std::vector<at::Tensor> advantages = batch.get("advantages");
  const std::vector<at::Tensor> returns = batch.get("returns");
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const std::vector<double> mask = values_of(batch.samples[i].response_mask);
    const std::vector<double> value = values_of(critic_values[i]);
    const int64_t length = static_cast<int64_t>(mask.size());
    int64_t last_counted = length - 1;
    while (mask[last_counted] == 0) --last_counted;
    std::vector<double> expected(length);
    double next_advantage = 0, next_value = 0;
    for (int64_t t = length - 1; t >= 0; --t) {
      const double reward = t == last_counted ? batch.rewards[i] : 0.0;
      const double delta = reward + 0.9 * next_value - value[t];
      expected[t] = delta + 0.9 * 0.8 * next_advantage;
      next_advantage = expected[t];
      next_value = value[t];
    }
    const std::vector<double> got = values_of(advantages[i]);
    const std::vector<double> target = values_of(returns[i]);
    for (int64_t t = 0; t < length; ++t) {
      EXPECT_NEAR(got[t], expected[t], 1e-6) << "sample " << i << " token " << t;
      EXPECT_NEAR(target[t], expected[t] + value[t], 1e-6) << "sample " << i << " token " << t;
    }
  }
}

TEST(RolloutBatch, MistakesNameTheSample) {
  auto groups = two_groups();
  groups[1][1].reward = nullptr;
  EXPECT_CONTAINS(error_message_of<Error>([&] { rollout_batch(groups); }),
                  "sample 4 (group 1) has no reward yet");
  groups = two_groups();
  groups[0][2].loss_mask.pop_back();
  EXPECT_CONTAINS(error_message_of<Error>([&] { rollout_batch(groups); }),
                  "sample 2 (group 0): loss_mask has 3 entries for 4 response tokens");
  groups = two_groups();
  groups[1].pop_back();
  EXPECT_CONTAINS(error_message_of<Error>([&] { rollout_batch(groups); }),
                  "group 1 has 2 rollouts, the first 3");
  groups = two_groups();
  groups[0][0].reward = {{"score", 0.5}};
  EXPECT_EQ(rollout_batch(groups, "score").rewards[0], 0.5);

  RolloutBatch batch = rollout_batch(two_groups());
  algorithms::AdvantageOptions ppo;
  ppo.estimator = algorithms::AdvantageEstimator::kPpo;
  EXPECT_CONTAINS(error_message_of<Error>(
                      [&] { compute_advantages(batch, ppo, algorithms::KlEstimator::kK1); }),
                  "no per-token \"values\"");
  algorithms::AdvantageOptions shaped;
  shaped.kl_coef = 0.1;
  EXPECT_CONTAINS(error_message_of<Error>(
                      [&] { compute_advantages(batch, shaped, algorithms::KlEstimator::kK1); }),
                  "no per-token \"old_log_probs\"");
  EXPECT_CONTAINS(error_message_of<Error>([&] {
                    batch.set("old_log_probs", std::vector<at::Tensor>(6, at::zeros({1})));
                  }),
                  "sample 0 has 2 response tokens");
}

// Rollouts a generate function split into samples sharing a rollout_id: group 0 holds rollout A
// (two samples, rewards 0.25 + 0.75) and B (one sample, 0); group 1 holds C (one sample, 0.5) and
// D (three samples, 0.5 + 0 + 0).
std::vector<std::vector<rollout::Sample>> split_rollouts() {
  auto piece = [](int64_t group, int64_t index, int64_t rollout_id, double reward) {
    rollout::Sample sample = make_sample(group, index, 2, reward);
    sample.rollout_id = rollout_id;
    return sample;
  };
  return {
      {piece(0, 0, 0, 0.25), piece(0, 1, 0, 0.75), make_sample(0, 2, 3, 0.0)},
      {make_sample(1, 3, 2, 0.5), piece(1, 4, 4, 0.5), piece(1, 5, 4, 0.0), piece(1, 6, 4, 0.0)}};
}

TEST(RolloutBatch, SplitRolloutsShareTheirRolloutsAdvantageAndItsOptimizerStep) {
  RolloutBatch batch = rollout_batch(split_rollouts());
  EXPECT_EQ(batch.rollout_sizes, (std::vector<int64_t>{2, 1, 1, 3}));
  EXPECT_EQ(batch.group_size, 2);
  ASSERT_TRUE(batch.has_split_rollouts());

  // grpo over rollouts: group 0's totals {1, 0}: mean 0.5, unbiased std sqrt(0.5); group 1's
  // totals {0.5, 0.5} agree, so 0.
  compute_advantages(batch, algorithms::AdvantageOptions{}, algorithms::KlEstimator::kK1);
  const double a = 0.5 / (std::sqrt(0.5) + 1e-6);
  const std::vector<double> expected = {a, a, -a, 0, 0, 0, 0};
  const std::vector<at::Tensor> advantages = batch.get("advantages");
  for (size_t i = 0; i < expected.size(); ++i) {
    for (double value : values_of(advantages[i])) EXPECT_NEAR(value, expected[i], 1e-6) << i;
  }

  // Two rollouts per step: {A, B} then {C, D}, never a rollout cut in two.
  const std::vector<trainer::TrainBatch> steps = batch.global_batches(2);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].samples.size(), 3u);
  EXPECT_EQ(steps[1].samples.size(), 4u);
  EXPECT_CONTAINS(error_message_of<ConfigError>([&] { batch.global_batches(3); }),
                  "does not divide the 4");

  algorithms::AdvantageOptions rloo;
  rloo.estimator = algorithms::AdvantageEstimator::kRloo;
  EXPECT_CONTAINS(error_message_of<ConfigError>(
                      [&] { compute_advantages(batch, rloo, algorithms::KlEstimator::kK1); }),
                  "rloo takes one sample per rollout");
}

TEST(RolloutBatch, GroupsWithDifferentNumbersOfRolloutsAreRefused) {
  std::vector<std::vector<rollout::Sample>> groups = split_rollouts();
  groups[1][0].rollout_id = 4;  // C joins D: group 1 has one rollout
  EXPECT_CONTAINS(error_message_of<Error>([&] { rollout_batch(groups); }),
                  "group 1 has 1 rollouts, the first 2");
}

}  // namespace rollout_batch_test
}  // namespace ooze::launcher
