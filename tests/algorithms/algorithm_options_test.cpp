#include "algorithms/algorithm_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tests/support/expect_error.h"

namespace ooze::algorithms {
namespace algorithm_options_test {

// The trainer's options hold --loss-aggregation; a struct of its own stands in for them here.
struct Aggregation {
  LossAggregation value = LossAggregation::kSequenceMeanTokenMean;
};

const OptionFields<Aggregation>& aggregation_fields() {
  static const OptionFields<Aggregation> fields = [] {
    OptionFields<Aggregation> f;
    f.section("loss");
    add_loss_aggregation_field(f, &Aggregation::value);
    return f;
  }();
  return fields;
}

// The fields an RL experiment declares for the algorithms: the "algorithm" and "loss" sections.
const ConfigSchema& algorithm_schema() {
  static const ConfigSchema schema = [] {
    ConfigSchema s;
    add_algorithm_fields(s);
    aggregation_fields().declare(s);
    return s;
  }();
  return schema;
}

std::string error_of(const std::vector<std::string>& args) {
  return testing::error_message_of([&] { load_config(algorithm_schema(), "", args); });
}

TEST(AlgorithmOptionsTest, DefaultsAreSlimes) {
  Config config = load_config(algorithm_schema(), "", {});
  AlgorithmOptions options = AlgorithmOptions::from_config(config);
  EXPECT_EQ(options.advantage.estimator, AdvantageEstimator::kGrpo);
  EXPECT_FALSE(options.advantage.disable_rewards_normalization);
  EXPECT_FALSE(options.advantage.disable_grpo_std_normalization);
  EXPECT_FALSE(options.advantage.normalize_advantages);
  EXPECT_DOUBLE_EQ(options.advantage.kl_coef, 0.0);
  EXPECT_DOUBLE_EQ(options.advantage.gamma, 1.0);
  EXPECT_DOUBLE_EQ(options.advantage.lambd, 1.0);
  EXPECT_EQ(options.policy_loss.kind, PolicyLossKind::kPpoClip);
  EXPECT_DOUBLE_EQ(options.policy_loss.eps_clip, 0.2);
  EXPECT_DOUBLE_EQ(options.policy_loss.clip_high(), 0.2);
  EXPECT_DOUBLE_EQ(options.policy_loss.eps_clip_c, 0.0);
  EXPECT_FALSE(options.policy_loss.use_kl_loss);
  EXPECT_EQ(options.policy_loss.kl_loss_type, KlEstimator::kK1);
  EXPECT_FALSE(options.policy_loss.mismatch.use_tis);
  EXPECT_DOUBLE_EQ(options.policy_loss.mismatch.tis_clip, 2.0);
  EXPECT_DOUBLE_EQ(options.policy_loss.mismatch.tis_clip_low, 0.0);
  EXPECT_FALSE(options.policy_loss.use_opsm);
  EXPECT_DOUBLE_EQ(options.policy_loss.opsm_delta, 1e-4);
  EXPECT_DOUBLE_EQ(options.value_loss.value_clip, 0.2);
  EXPECT_EQ(aggregation_fields().read(config).value, LossAggregation::kSequenceMeanTokenMean);
}

TEST(AlgorithmOptionsTest, LossAggregationNamesRoundTripAndUnknownOnesAreRefused) {
  for (const char* name : {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum"}) {
    const Config config = load_config(algorithm_schema(), "", {"--loss-aggregation", name});
    EXPECT_EQ(loss_aggregation_name(aggregation_fields().read(config).value), name);
  }
  EXPECT_THROW(load_config(algorithm_schema(), "", {"--loss-aggregation", "sum"}), ConfigError);
}

TEST(AlgorithmOptionsTest, SlimeFlagNames) {
  Config config = load_config(algorithm_schema(), "",
                              {"--advantage-estimator",
                               "gspo",
                               "--eps-clip",
                               "3e-4",
                               "--eps-clip-high",
                               "4e-4",
                               "--eps-clip-c",
                               "3",
                               "--disable-grpo-std-normalization",
                               "--normalize-advantages",
                               "--use-kl-loss",
                               "--kl-loss-coef",
                               "0.01",
                               "--kl-loss-type",
                               "low_var_kl",
                               "--use-unbiased-kl",
                               "--entropy-coef",
                               "0.001",
                               "--use-tis",
                               "--tis-clip",
                               "3",
                               "--tis-clip-low",
                               "0.5",
                               "--tis-level",
                               "geometric",
                               "--tis-mode",
                               "mask",
                               "--get-mismatch-metrics",
                               "--use-opsm",
                               "--opsm-delta",
                               "0.01",
                               "--value-clip",
                               "0.5",
                               "--loss-aggregation",
                               "seq-mean-token-sum"});
  AlgorithmOptions options = AlgorithmOptions::from_config(config);
  EXPECT_EQ(options.advantage.estimator, AdvantageEstimator::kGspo);
  EXPECT_EQ(options.policy_loss.kind, PolicyLossKind::kGspo);
  EXPECT_TRUE(options.advantage.disable_grpo_std_normalization);
  EXPECT_TRUE(options.advantage.normalize_advantages);
  EXPECT_DOUBLE_EQ(options.policy_loss.eps_clip, 3e-4);
  EXPECT_DOUBLE_EQ(options.policy_loss.clip_high(), 4e-4);
  EXPECT_DOUBLE_EQ(options.policy_loss.eps_clip_c, 3.0);
  EXPECT_TRUE(options.policy_loss.use_kl_loss);
  EXPECT_DOUBLE_EQ(options.policy_loss.kl_loss_coef, 0.01);
  EXPECT_EQ(options.policy_loss.kl_loss_type, KlEstimator::kLowVarKl);
  EXPECT_TRUE(options.policy_loss.use_unbiased_kl);
  EXPECT_DOUBLE_EQ(options.policy_loss.entropy_coef, 0.001);
  EXPECT_TRUE(options.policy_loss.mismatch.use_tis);
  EXPECT_DOUBLE_EQ(options.policy_loss.mismatch.tis_clip, 3.0);
  EXPECT_DOUBLE_EQ(options.policy_loss.mismatch.tis_clip_low, 0.5);
  EXPECT_EQ(options.policy_loss.mismatch.level, TisLevel::kGeometric);
  EXPECT_EQ(options.policy_loss.mismatch.mode, TisMode::kMask);
  EXPECT_TRUE(options.policy_loss.mismatch.get_mismatch_metrics);
  EXPECT_TRUE(options.policy_loss.use_opsm);
  EXPECT_DOUBLE_EQ(options.policy_loss.opsm_delta, 0.01);
  EXPECT_DOUBLE_EQ(options.value_loss.value_clip, 0.5);
  EXPECT_EQ(aggregation_fields().read(config).value, LossAggregation::kSequenceMeanTokenSum);

  // Unset, the upper clip follows --eps-clip as in Slime.
  Config symmetric = load_config(algorithm_schema(), "", {"--eps-clip", "0.1"});
  EXPECT_DOUBLE_EQ(AlgorithmOptions::from_config(symmetric).policy_loss.clip_high(), 0.1);
  Config ppo = load_config(
      algorithm_schema(), "",
      {"--advantage-estimator", "ppo", "--kl-coef", "0.05", "--gamma", "0.99", "--lambd", "0.95"});
  AlgorithmOptions ppo_options = AlgorithmOptions::from_config(ppo);
  EXPECT_EQ(ppo_options.advantage.estimator, AdvantageEstimator::kPpo);
  EXPECT_DOUBLE_EQ(ppo_options.advantage.kl_coef, 0.05);
  EXPECT_DOUBLE_EQ(ppo_options.advantage.gamma, 0.99);
  EXPECT_DOUBLE_EQ(ppo_options.advantage.lambd, 0.95);
}

TEST(AlgorithmOptionsTest, ContradictionsAreReported) {
  EXPECT_CONTAINS(error_of({"--advantage-estimator", "ppo", "--use-kl-loss", "--kl-loss-coef",
                            "0.01", "--kl-coef", "0.1"}),
                  "use_kl_loss = true together with kl_coef = 0.1");
  EXPECT_CONTAINS(error_of({"--kl-coef", "0.1"}),
                  "kl_coef = 0.1 has no effect with advantage_estimator = grpo");
  EXPECT_CONTAINS(error_of({"--kl-loss-coef", "0.01"}),
                  "kl_loss_coef = 0.01 has no effect without use_kl_loss = true");
  EXPECT_CONTAINS(error_of({"--use-unbiased-kl"}), "use_unbiased_kl = true has no effect");
  EXPECT_CONTAINS(error_of({"--eps-clip-c", "0.8"}), "eps_clip_c = 0.8 must be > 1");
  EXPECT_CONTAINS(error_of({"--tis-clip", "1", "--tis-clip-low", "1.5"}),
                  "tis_clip_low = 1.5 must be below tis_clip = 1");
  EXPECT_CONTAINS(error_of({"--gamma", "1.5"}), "--gamma");
  EXPECT_CONTAINS(error_of({"--advantage-estimator", "reinforce"}), "expected one of {grpo");
  EXPECT_CONTAINS(error_of({"--loss-aggregation", "sum"}), "seq-mean-token-sum");
}

// Options built by hand meet the same rules, with the same messages, as those from flags.
TEST(AlgorithmOptionsTest, HandBuiltOptionsMeetTheSameRules) {
  AlgorithmOptions options;
  options.advantage.kl_coef = 0.1;  // grpo puts no KL in its rewards
  try {
    options.validate();
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("kl_coef = 0.1 has no effect", 0), 0u) << e.what();
    EXPECT_CONTAINS(error_of({"--kl-coef", "0.1"}), e.what());
  }
  options = AlgorithmOptions();
  options.policy_loss.eps_clip_c = 0.8;
  EXPECT_THROW(options.validate(), ConfigError);
  options.policy_loss.eps_clip_c = 3;
  options.policy_loss.mismatch.tis_clip_low = 2.5;
  EXPECT_THROW(options.validate(), ConfigError);
  options.policy_loss.mismatch.tis_clip_low = 0.5;
  EXPECT_NO_THROW(options.validate());
}

}  // namespace algorithm_options_test
}  // namespace ooze::algorithms
