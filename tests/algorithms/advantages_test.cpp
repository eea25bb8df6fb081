// Advantage estimators against straightforward loops over std::vector<double> written here.
#include "algorithms/advantages.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "tests/algorithms/double_vectors.h"

namespace ooze::algorithms {
namespace advantages_test {

void expect_near_vec(const Vec& expected, const at::Tensor& actual, double tolerance,
                     const std::string& what) {
  Vec got = vec_of(actual);
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "]";
    EXPECT_NEAR(got[i], expected[i], tolerance) << what << "[" << i << "]";
  }
}

// A step of samples: rewards, and per sample a response mask, a KL and critic values.
struct Samples {
  Vec rewards;
  std::vector<Vec> masks, kl, values;

  AdvantageInputs inputs(int64_t group_size) const {
    AdvantageInputs in;
    in.rewards = tensor_of(rewards);
    in.group_size = group_size;
    for (size_t i = 0; i < rewards.size(); ++i) {
      in.response_masks.push_back(tensor_of(masks[i]));
      in.kl.push_back(tensor_of(kl[i]));
      in.values.push_back(tensor_of(values[i]));
    }
    return in;
  }
};

// Random samples; response lengths include 0 (empty response), masks include zeros (tool output
// turns) and some trailing zeros so that the last counted token is not the last token.
Samples random_samples(int num_samples, int max_length, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::uniform_int_distribution<int> length(0, max_length);
  Samples s;
  for (int i = 0; i < num_samples; ++i) {
    s.rewards.push_back(i % 3 == 0 ? 1.0 : uniform(rng));  // some ties, mostly distinct
    int n = i == 1 ? 0 : length(rng);
    Vec mask(n), kl(n), values(n);
    for (int t = 0; t < n; ++t) {
      mask[t] = uniform(rng) > -0.7 ? 1.0 : 0.0;
      kl[t] = 0.1 * uniform(rng);
      values[t] = uniform(rng);
    }
    if (i == 2 && n > 2) mask[n - 1] = mask[n - 2] = 0.0;  // trailing masked tokens
    if (i == 3) std::fill(mask.begin(), mask.end(), 0.0);  // nothing counts
    s.masks.push_back(mask);
    s.kl.push_back(kl);
    s.values.push_back(values);
  }
  return s;
}

// --- Reference implementations ---

Vec reference_group_normalized(const Vec& rewards, int group, bool divide_by_std) {
  Vec out(rewards.size());
  for (size_t start = 0; start < rewards.size(); start += group) {
    double mean = 0;
    for (int j = 0; j < group; ++j) mean += rewards[start + j];
    mean /= group;
    double squares = 0;
    for (int j = 0; j < group; ++j) squares += std::pow(rewards[start + j] - mean, 2);
    double std_dev = group > 1 ? std::sqrt(squares / (group - 1)) : 0.0;
    for (int j = 0; j < group; ++j) {
      double centered = rewards[start + j] - mean;
      out[start + j] = divide_by_std ? centered / (std_dev + 1e-6) : centered;
    }
  }
  return out;
}

Vec reference_leave_one_out(const Vec& rewards, int group) {
  Vec out(rewards.size(), 0.0);
  if (group == 1) return out;
  for (size_t start = 0; start < rewards.size(); start += group) {
    for (int j = 0; j < group; ++j) {
      double others = 0;
      for (int k = 0; k < group; ++k) {
        if (k != j) others += rewards[start + k];
      }
      out[start + j] = rewards[start + j] - others / (group - 1);
    }
  }
  return out;
}

// The KL penalises only tokens inside the loss mask; the reward lands on the last counted token.
Vec reference_token_rewards(double reward, const Vec& kl, const Vec& mask, double kl_coef) {
  Vec out(kl.size(), 0.0);
  for (size_t t = 0; t < kl.size(); ++t) {
    if (mask[t] > 0) out[t] = -kl_coef * mask[t] * kl[t];
  }
  for (int t = static_cast<int>(mask.size()) - 1; t >= 0; --t) {
    if (mask[t] > 0) {
      out[t] += reward;
      break;
    }
  }
  return out;
}

Vec reference_discounted(const Vec& rewards, double gamma) {
  Vec out(rewards.size());
  double running = 0;
  for (int t = static_cast<int>(rewards.size()) - 1; t >= 0; --t) {
    running = rewards[t] + gamma * running;
    out[t] = running;
  }
  return out;
}

Vec reference_gae(const Vec& rewards, const Vec& values, double gamma, double lambd) {
  const int n = static_cast<int>(rewards.size());
  Vec out(n);
  double running = 0;
  for (int t = n - 1; t >= 0; --t) {
    double next = t + 1 < n ? values[t + 1] : 0.0;
    double delta = rewards[t] + gamma * next - values[t];
    running = delta + gamma * lambd * running;
    out[t] = running;
  }
  return out;
}

AdvantageOptions options_for(AdvantageEstimator estimator) {
  AdvantageOptions options;
  options.estimator = estimator;
  return options;
}

// --- Group estimators ---

TEST(AdvantagesTest, GrpoSubtractsGroupMeanAndDividesByUnbiasedStd) {
  Samples s = random_samples(12, 9, 1);
  // Group 1 (samples 4..7) has equal rewards: zero std must give finite (zero) advantages.
  for (int i = 4; i < 8; ++i) s.rewards[i] = 0.3;
  AdvantageResult result = compute_advantages(s.inputs(4), options_for(AdvantageEstimator::kGrpo));
  Vec scalar = reference_group_normalized(s.rewards, 4, true);
  ASSERT_EQ(result.advantages.size(), 12u);
  for (int i = 0; i < 12; ++i) {
    Vec expected(s.masks[i].size(), scalar[i]);
    // 1e-9: in the equal-reward group, rounding of the mean (1e-17) is divided by eps = 1e-6.
    expect_near_vec(expected, result.advantages[i], 1e-9, "advantages " + std::to_string(i));
    expect_near_vec(expected, result.returns[i], 1e-9, "returns " + std::to_string(i));
  }
  for (int i = 4; i < 8; ++i) {
    for (double v : vec_of(result.advantages[i])) EXPECT_NEAR(v, 0.0, 1e-9);
  }
  EXPECT_GT(std::abs(scalar[0]) + std::abs(scalar[9]), 0.5) << "the rewards should have spread";
}

TEST(AdvantagesTest, SingleSampleGroupsGiveZeroNotNaN) {
  Samples s = random_samples(5, 6, 2);
  for (AdvantageEstimator estimator : {AdvantageEstimator::kGrpo, AdvantageEstimator::kRloo,
                                       AdvantageEstimator::kReinforcePlusPlusBaseline}) {
    AdvantageResult result = compute_advantages(s.inputs(1), options_for(estimator));
    for (const at::Tensor& advantages : result.advantages) {
      for (double v : vec_of(advantages)) EXPECT_EQ(v, 0.0) << advantage_estimator_name(estimator);
    }
  }
  Vec direct = vec_of(group_normalized_rewards(tensor_of(s.rewards), 1, true));
  for (double v : direct) EXPECT_EQ(v, 0.0);
}

TEST(AdvantagesTest, DrGrpoOnlySubtractsTheMean) {
  Samples s = random_samples(8, 5, 3);
  AdvantageOptions options = options_for(AdvantageEstimator::kGrpo);
  options.disable_grpo_std_normalization = true;
  AdvantageResult result = compute_advantages(s.inputs(4), options);
  Vec scalar = reference_group_normalized(s.rewards, 4, false);
  for (int i = 0; i < 8; ++i) {
    expect_near_vec(Vec(s.masks[i].size(), scalar[i]), result.advantages[i], 1e-12, "dr grpo");
  }
}

TEST(AdvantagesTest, GspoAndCispoUseGrpoAdvantages) {
  Samples s = random_samples(8, 7, 4);
  AdvantageResult grpo = compute_advantages(s.inputs(4), options_for(AdvantageEstimator::kGrpo));
  for (AdvantageEstimator estimator : {AdvantageEstimator::kGspo, AdvantageEstimator::kCispo}) {
    AdvantageResult other = compute_advantages(s.inputs(4), options_for(estimator));
    for (int i = 0; i < 8; ++i) EXPECT_TRUE(at::equal(grpo.advantages[i], other.advantages[i]));
  }
}

TEST(AdvantagesTest, DisabledRewardsNormalizationKeepsRawRewards) {
  Samples s = random_samples(6, 4, 5);
  AdvantageOptions options = options_for(AdvantageEstimator::kGrpo);
  options.disable_rewards_normalization = true;
  AdvantageResult result = compute_advantages(s.inputs(3), options);
  for (int i = 0; i < 6; ++i) {
    expect_near_vec(Vec(s.masks[i].size(), s.rewards[i]), result.advantages[i], 0, "raw");
  }
}

TEST(AdvantagesTest, RlooUsesTheOtherSamplesOfTheGroupAsBaseline) {
  Samples s = random_samples(12, 6, 6);
  for (int group : {2, 3, 6}) {
    AdvantageResult result =
        compute_advantages(s.inputs(group), options_for(AdvantageEstimator::kRloo));
    Vec scalar = reference_leave_one_out(s.rewards, group);
    for (int i = 0; i < 12; ++i) {
      expect_near_vec(Vec(s.masks[i].size(), scalar[i]), result.advantages[i], 1e-12, "rloo");
    }
  }
}

// --- Token-reward estimators ---

TEST(AdvantagesTest, ReinforcePlusPlusDiscountsKlPenalisedTokenRewards) {
  Samples s = random_samples(8, 12, 7);
  AdvantageOptions options = options_for(AdvantageEstimator::kReinforcePlusPlus);
  options.kl_coef = 0.3;
  options.gamma = 0.9;
  AdvantageResult result = compute_advantages(s.inputs(4), options);
  for (int i = 0; i < 8; ++i) {
    Vec expected =
        reference_discounted(reference_token_rewards(s.rewards[i], s.kl[i], s.masks[i], 0.3), 0.9);
    expect_near_vec(expected, result.advantages[i], 1e-12, "rf++ " + std::to_string(i));
    expect_near_vec(expected, result.returns[i], 1e-12, "rf++ returns");
  }
  EXPECT_TRUE(options.whitens_advantages());
}

TEST(AdvantagesTest, ReinforcePlusPlusBaselineSubtractsGroupMeanAndKl) {
  Samples s = random_samples(9, 8, 8);
  AdvantageOptions options = options_for(AdvantageEstimator::kReinforcePlusPlusBaseline);
  options.kl_coef = 0.5;
  AdvantageResult result = compute_advantages(s.inputs(3), options);
  Vec centered = reference_group_normalized(s.rewards, 3, false);
  for (int i = 0; i < 9; ++i) {
    Vec expected(s.kl[i].size());
    for (size_t t = 0; t < expected.size(); ++t) {
      expected[t] = centered[i] - (s.masks[i][t] > 0 ? 0.5 * s.kl[i][t] : 0.0);  // counted only
    }
    expect_near_vec(expected, result.advantages[i], 1e-12, "rf++ baseline");
  }
  EXPECT_TRUE(options.whitens_advantages());
}

TEST(AdvantagesTest, PpoIsGaeOverKlPenalisedRewards) {
  Samples s = random_samples(6, 150, 9);  // longer than one 64-token chunk
  AdvantageOptions options = options_for(AdvantageEstimator::kPpo);
  options.kl_coef = 0.2;
  options.gamma = 0.99;
  options.lambd = 0.95;
  AdvantageResult result = compute_advantages(s.inputs(2), options);
  for (int i = 0; i < 6; ++i) {
    Vec rewards = reference_token_rewards(s.rewards[i], s.kl[i], s.masks[i], 0.2);
    Vec expected = reference_gae(rewards, s.values[i], 0.99, 0.95);
    expect_near_vec(expected, result.advantages[i], 1e-10, "gae");
    Vec returns = expected;
    for (size_t t = 0; t < returns.size(); ++t) returns[t] += s.values[i][t];
    expect_near_vec(returns, result.returns[i], 1e-10, "returns");
  }
  EXPECT_FALSE(options.whitens_advantages());
  options.normalize_advantages = true;
  EXPECT_TRUE(options.whitens_advantages());
}

// Multi-turn samples: masks with holes in the middle (tool output) and at the end, a sample with
// nothing counted, and one without holes. The KL is large on the masked tokens, so any penalty
// that leaked there would show in the returns of the tokens before them.
Samples samples_with_mask_holes() {
  Samples s;
  s.rewards = {2.0, -1.0, 0.5, 1.5};
  s.masks = {{1, 1, 0, 0, 1, 1, 0, 0}, {0, 1, 0, 1, 0}, {0, 0, 0}, {1, 1, 1}};
  s.kl = {{0.1, -0.2, 5.0, 7.0, 0.3, 0.05, 9.0, 11.0},
          {4.0, 0.2, -6.0, 0.1, 8.0},
          {3.0, 3.0, 3.0},
          {0.1, 0.2, 0.3}};
  s.values = {{0.5, -0.1, 0.3, 0.2, 0.9, -0.4, 0.7, 0.1},
              {0.2, 0.3, -0.5, 0.6, 0.4},
              {0.1, 0.2, 0.3},
              {-0.3, 0.0, 0.8}};
  return s;
}

TEST(AdvantagesTest, MaskedTokensCarryNoKlPenalty) {
  Samples s = samples_with_mask_holes();
  const double kl_coef = 0.3;
  AdvantageInputs in = s.inputs(2);
  std::vector<at::Tensor> token_rewards =
      kl_penalized_token_rewards(in.rewards, in.kl, in.response_masks, kl_coef);
  ASSERT_EQ(token_rewards.size(), s.rewards.size());
  for (size_t i = 0; i < s.rewards.size(); ++i) {
    expect_near_vec(reference_token_rewards(s.rewards[i], s.kl[i], s.masks[i], kl_coef),
                    token_rewards[i], 1e-15, "token rewards " + std::to_string(i));
    Vec got = vec_of(token_rewards[i]);
    for (size_t t = 0; t < got.size(); ++t) {
      if (s.masks[i][t] == 0) {
        EXPECT_EQ(got[t], 0.0) << "sample " << i << " token " << t;
      }
    }
  }
  // The reward lands on the last counted token (5), not on the masked last token (7) ...
  Vec first = vec_of(token_rewards[0]);
  EXPECT_NEAR(first[5], 2.0 - kl_coef * 0.05, 1e-15);
  EXPECT_EQ(first[7], 0.0);
  EXPECT_NEAR(first[0], -kl_coef * 0.1, 1e-15);
  EXPECT_NEAR(vec_of(token_rewards[1])[3], -1.0 - kl_coef * 0.1, 1e-15);
  // ... and nowhere when nothing counts.
  for (double v : vec_of(token_rewards[2])) EXPECT_EQ(v, 0.0);

  // A non-finite KL on a masked token (e.g. log-probs of tool output) does not poison anything.
  Vec odd_kl = s.kl[1];
  odd_kl[0] = std::numeric_limits<double>::infinity();
  odd_kl[2] = std::numeric_limits<double>::quiet_NaN();
  in.kl[1] = tensor_of(odd_kl);
  token_rewards = kl_penalized_token_rewards(in.rewards, in.kl, in.response_masks, kl_coef);
  expect_near_vec(reference_token_rewards(s.rewards[1], s.kl[1], s.masks[1], kl_coef),
                  token_rewards[1], 1e-15, "token rewards with non-finite masked KL");
}

// REINFORCE++-baseline subtracts the KL from the broadcast advantage on counted tokens only:
// masked tokens keep the group-normalised reward, even where their KL is not finite.
TEST(AdvantagesTest, ReinforcePlusPlusBaselineIgnoresKlOfMaskedTokens) {
  Samples s = samples_with_mask_holes();
  s.kl[1][2] = std::numeric_limits<double>::quiet_NaN();  // a masked token
  AdvantageOptions options = options_for(AdvantageEstimator::kReinforcePlusPlusBaseline);
  options.kl_coef = 0.3;
  const AdvantageResult result = compute_advantages(s.inputs(2), options);
  // Group means of (2, -1) and (0.5, 1.5): 0.5 and 1.0.
  const Vec centred = {1.5, -1.5, -0.5, 0.5};
  for (size_t i = 0; i < s.rewards.size(); ++i) {
    const Vec got = vec_of(result.advantages[i]);
    ASSERT_EQ(got.size(), s.masks[i].size());
    for (size_t t = 0; t < got.size(); ++t) {
      const double want = centred[i] - (s.masks[i][t] > 0 ? 0.3 * s.kl[i][t] : 0.0);
      EXPECT_NEAR(got[t], want, 1e-12) << "sample " << i << " token " << t;
    }
  }
}

TEST(AdvantagesTest, ReinforcePlusPlusReturnsIgnoreKlOfMaskedTokens) {
  Samples s = samples_with_mask_holes();
  AdvantageOptions options = options_for(AdvantageEstimator::kReinforcePlusPlus);
  options.kl_coef = 0.3;
  options.gamma = 0.9;
  AdvantageResult result = compute_advantages(s.inputs(2), options);
  for (size_t i = 0; i < s.rewards.size(); ++i) {
    // Independently: r_t = -kl_coef * KL_t on counted tokens, + reward on the last counted one;
    // G_t = sum_{k >= t} gamma^(k-t) r_k.
    const Vec& mask = s.masks[i];
    const size_t n = mask.size();
    int last_counted = -1;
    for (size_t t = 0; t < n; ++t) {
      if (mask[t] > 0) last_counted = static_cast<int>(t);
    }
    Vec expected(n, 0.0);
    for (size_t t = 0; t < n; ++t) {
      double discount = 1.0;
      for (size_t k = t; k < n; ++k, discount *= options.gamma) {
        double r = mask[k] > 0 ? -options.kl_coef * s.kl[i][k] : 0.0;
        if (static_cast<int>(k) == last_counted) r += s.rewards[i];
        expected[t] += discount * r;
      }
    }
    expect_near_vec(expected, result.advantages[i], 1e-12, "rf++ " + std::to_string(i));
    expect_near_vec(expected, result.returns[i], 1e-12, "rf++ returns " + std::to_string(i));
  }
  // By hand, sample 0 token 4: -0.3 * 0.3 + 0.9 * (2 - 0.3 * 0.05); tokens 6, 7 after the last
  // counted one return 0.
  Vec first = vec_of(result.advantages[0]);
  EXPECT_NEAR(first[4], -0.09 + 0.9 * 1.985, 1e-12);
  EXPECT_EQ(first[6], 0.0);
  EXPECT_EQ(first[7], 0.0);
  // Had the masked tokens been penalised, token 0 would differ by far more than rounding.
  double leaked = 0, discount = 1;
  for (size_t k = 0; k < s.kl[0].size(); ++k, discount *= options.gamma) {
    if (s.masks[0][k] == 0) leaked += discount * options.kl_coef * s.kl[0][k];
  }
  EXPECT_GT(leaked, 1.0);
}

TEST(AdvantagesTest, PpoGaeIgnoresKlOfMaskedTokens) {
  Samples s = samples_with_mask_holes();
  AdvantageOptions options = options_for(AdvantageEstimator::kPpo);
  options.kl_coef = 0.2;
  options.gamma = 0.99;
  options.lambd = 0.95;
  AdvantageResult result = compute_advantages(s.inputs(2), options);
  for (size_t i = 0; i < s.rewards.size(); ++i) {
    // Independently: GAE over every token (masked ones keep their values), with the KL penalty on
    // counted tokens only and the reward on the last counted token.
    const Vec& mask = s.masks[i];
    const Vec& v = s.values[i];
    const int n = static_cast<int>(mask.size());
    int last_counted = -1;
    for (int t = 0; t < n; ++t) {
      if (mask[t] > 0) last_counted = t;
    }
    Vec advantages(n, 0.0);
    double next_advantage = 0;
    for (int t = n - 1; t >= 0; --t) {
      double r = mask[t] > 0 ? -options.kl_coef * s.kl[i][t] : 0.0;
      if (t == last_counted) r += s.rewards[i];
      double next_value = t + 1 < n ? v[t + 1] : 0.0;
      double delta = r + options.gamma * next_value - v[t];
      advantages[t] = delta + options.gamma * options.lambd * next_advantage;
      next_advantage = advantages[t];
    }
    Vec returns(n);
    for (int t = 0; t < n; ++t) returns[t] = advantages[t] + v[t];
    expect_near_vec(advantages, result.advantages[i], 1e-12, "ppo " + std::to_string(i));
    expect_near_vec(returns, result.returns[i], 1e-12, "ppo returns " + std::to_string(i));
  }
  // The vectorised GAE agrees on the same token rewards.
  AdvantageInputs in = s.inputs(2);
  GaeResult chunked =
      gae_chunked(kl_penalized_token_rewards(in.rewards, in.kl, in.response_masks, options.kl_coef),
                  in.values, options.gamma, options.lambd);
  for (size_t i = 0; i < s.rewards.size(); ++i) {
    expect_near_vec(vec_of(result.advantages[i]), chunked.advantages[i], 1e-12, "chunked gae");
  }
}

TEST(AdvantagesTest, ChunkedGaeAgreesWithThePlainLoop) {
  std::mt19937 rng(10);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<at::Tensor> rewards, values;
  std::vector<Vec> reward_vecs, value_vecs;
  for (int length : {0, 1, 5, 63, 64, 65, 200, 333}) {
    Vec r(length), v(length);
    for (int t = 0; t < length; ++t) r[t] = uniform(rng), v[t] = uniform(rng);
    reward_vecs.push_back(r);
    value_vecs.push_back(v);
    rewards.push_back(tensor_of(r));
    values.push_back(tensor_of(v));
  }
  for (auto [gamma, lambd] : std::vector<std::pair<double, double>>{
           {1.0, 1.0}, {0.99, 0.95}, {0.5, 0.0}, {0.0, 1.0}, {1.0, 0.9}}) {
    GaeResult plain = gae_loop(rewards, values, gamma, lambd);
    GaeResult dispatched = gae(rewards, values, gamma, lambd);
    GaeResult chunked = gae_chunked(rewards, values, gamma, lambd);
    for (size_t i = 0; i < rewards.size(); ++i) {
      Vec expected = reference_gae(reward_vecs[i], value_vecs[i], gamma, lambd);
      expect_near_vec(expected, plain.advantages[i], 1e-12, "plain");
      expect_near_vec(expected, dispatched.advantages[i], 1e-12, "dispatched on the CPU");
      expect_near_vec(expected, chunked.advantages[i], 1e-10, "chunked");
      Vec returns = expected;
      for (size_t t = 0; t < returns.size(); ++t) returns[t] += value_vecs[i][t];
      expect_near_vec(returns, chunked.returns[i], 1e-10, "chunked returns");
    }
  }
}

TEST(AdvantagesTest, ReverseDiscountedSumAnyChunkSize) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  const int rows = 3, length = 130;
  Vec flat(rows * length);
  for (double& v : flat) v = uniform(rng);
  at::Tensor x = tensor_of(flat).reshape({rows, length});
  for (double discount : {0.0, 0.3, 0.97, 1.0}) {
    for (int64_t chunk : {1, 7, 64, 130, 1000}) {
      at::Tensor y = reverse_discounted_sum(x, discount, chunk);
      for (int r = 0; r < rows; ++r) {
        Vec row(flat.begin() + r * length, flat.begin() + (r + 1) * length);
        expect_near_vec(reference_discounted(row, discount), y[r], 1e-10,
                        "chunk " + std::to_string(chunk));
      }
    }
  }
}

TEST(AdvantagesTest, Float32InputsGiveFloat32CloseToDouble) {
  Samples s = random_samples(8, 100, 12);
  AdvantageOptions options = options_for(AdvantageEstimator::kPpo);
  options.kl_coef = 0.1;
  options.gamma = 0.99;
  options.lambd = 0.95;
  AdvantageInputs in = s.inputs(4);
  AdvantageResult exact = compute_advantages(in, options);
  in.rewards = in.rewards.to(at::kFloat);
  for (auto& t : in.kl) t = t.to(at::kFloat);
  for (auto& t : in.values) t = t.to(at::kFloat);
  AdvantageResult single = compute_advantages(in, options);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(single.advantages[i].scalar_type(), at::kFloat);
    expect_near_vec(vec_of(exact.advantages[i]), single.advantages[i], 1e-4, "fp32");
  }
}

TEST(AdvantagesTest, InconsistentInputsAreRejected) {
  Samples s = random_samples(6, 5, 13);
  EXPECT_THROW(compute_advantages(s.inputs(4), options_for(AdvantageEstimator::kGrpo)), Error);
  AdvantageInputs no_values = s.inputs(2);
  no_values.values.clear();
  EXPECT_THROW(compute_advantages(no_values, options_for(AdvantageEstimator::kPpo)), Error);
  AdvantageOptions penalised = options_for(AdvantageEstimator::kReinforcePlusPlus);
  penalised.kl_coef = 0.1;
  AdvantageInputs no_kl = s.inputs(2);
  no_kl.kl.clear();
  EXPECT_THROW(compute_advantages(no_kl, penalised), Error);
  AdvantageInputs short_kl = s.inputs(2);
  short_kl.kl[0] = tensor_of(Vec(s.masks[0].size() + 1, 0.0));
  EXPECT_THROW(compute_advantages(short_kl, penalised), Error);
  AdvantageInputs missing_mask = s.inputs(2);
  missing_mask.response_masks.pop_back();
  EXPECT_THROW(compute_advantages(missing_mask, options_for(AdvantageEstimator::kGrpo)), Error);
  // --advantage-estimator: every name reads back as itself, an unknown one is refused.
  ConfigSchema schema;
  AdvantageOptions::fields().declare(schema);
  EXPECT_THROW(load_config(schema, "", {"--advantage-estimator", "reinforce"}), ConfigError);
  for (const char* name : {"grpo", "gspo", "cispo", "rloo", "reinforce_plus_plus",
                           "reinforce_plus_plus_baseline", "ppo"}) {
    const Config config = load_config(schema, "", {"--advantage-estimator", name});
    EXPECT_EQ(advantage_estimator_name(AdvantageOptions::fields().read(config).estimator), name);
  }
}

}  // namespace advantages_test
}  // namespace ooze::algorithms
