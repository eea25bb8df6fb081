#include "launcher/experiment_config.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace ooze::launcher {
namespace {

std::string error_of(const std::vector<std::string>& args) {
  try {
    load_config(experiment_schema(), "", args);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST(ExperimentConfigTest, DefaultsAreValid) {
  Config config = load_config(experiment_schema(), "", {});
  EXPECT_EQ(config.get<int64_t>("seed"), 1234);
  EXPECT_EQ(config.get<std::string>("output_dir"), "runs/default");
  EXPECT_EQ(config.get<std::string>("log_level"), "info");
  EXPECT_EQ(config.get<std::string>("comm_backend"), "gloo");
  EXPECT_DOUBLE_EQ(config.get<double>("comm_timeout_seconds"), 300.0);
  EXPECT_EQ(config.get<int64_t>("world_size"), 2);
  EXPECT_EQ(config.get<int64_t>("num_steps"), 50);
  EXPECT_DOUBLE_EQ(config.get<double>("lr"), 0.05);
  EXPECT_EQ(config.get<int64_t>("global_batch_size"), 64);
  EXPECT_EQ(config.get<int64_t>("micro_batch_size"), 16);
  EXPECT_EQ(config.get<int64_t>("save_interval"), 0);
  EXPECT_EQ(config.get<int64_t>("feature_dim"), 16);
}

TEST(ExperimentConfigTest, SlimeFlagNames) {
  Config config = load_config(experiment_schema(), "",
                              {"--lr", "1e-3", "--global-batch-size", "128", "--micro-batch-size",
                               "32", "--save-interval", "10"});
  EXPECT_DOUBLE_EQ(config.get<double>("lr"), 1e-3);
  EXPECT_EQ(config.get<int64_t>("global_batch_size"), 128);
  EXPECT_EQ(config.get<int64_t>("micro_batch_size"), 32);
  EXPECT_EQ(config.get<int64_t>("save_interval"), 10);
}

TEST(ExperimentConfigTest, Ranges) {
  EXPECT_CONTAINS(error_of({"--world-size", "0"}), "--world-size: expected an integer >= 1");
  EXPECT_CONTAINS(error_of({"--lr", "0"}), "--lr: expected a number > 0, got '0'");
  EXPECT_CONTAINS(error_of({"--comm-timeout-seconds", "-5"}), "expected a number > 0");
  EXPECT_CONTAINS(error_of({"--save-interval", "-1"}), "expected an integer >= 0");
  EXPECT_CONTAINS(error_of({"--comm-backend", "mpi"}), "expected one of {gloo, nccl}, got 'mpi'");
  EXPECT_CONTAINS(error_of({"--log-level", "verbose"}),
                  "expected one of {debug, info, warn, error}, got 'verbose'");
}

TEST(ExperimentConfigTest, GlobalBatchMustSplitAcrossRanks) {
  std::string message = error_of({"--world-size", "3"});
  EXPECT_CONTAINS(message, "global_batch_size = 64 is not divisible by world_size = 3");
  EXPECT_CONTAINS(message, "(1 problem)");  // the micro-batch check does not pile on
}

TEST(ExperimentConfigTest, GlobalBatchMustSplitIntoMicroBatches) {
  std::string message = error_of({"--micro-batch-size", "24"});
  EXPECT_CONTAINS(message,
                  "global_batch_size = 64 is not divisible by world_size * "
                  "micro_batch_size = 2 * 24 = 48");
  Config config =
      load_config(experiment_schema(), "", {"--world-size", "4", "--micro-batch-size", "8"});
  EXPECT_EQ(config.get<int64_t>("world_size"), 4);
}

TEST(ExperimentConfigTest, HelpCoversEveryFieldBySection) {
  std::string help = experiment_schema().help();
  for (const auto& spec : experiment_schema().fields()) {
    // Bool flags are listed with their negation: --[no-]use-tis.
    std::string flag =
        spec.type == FieldType::kBool ? "--[no-]" + spec.flag().substr(2) : spec.flag();
    EXPECT_CONTAINS(help, flag);
  }
  size_t run = help.find("run:"), comm = help.find("comm:"), train = help.find("train:"),
         demo = help.find("demo:");
  ASSERT_NE(demo, std::string::npos);
  EXPECT_LT(run, comm);
  EXPECT_LT(comm, train);
  EXPECT_LT(train, demo);
}

}  // namespace
}  // namespace ooze::launcher

// --- RL algorithm and batching fields (algorithms/algorithm_options.h, fsdp/packing.h) ---

#include "algorithms/algorithm_options.h"

namespace ooze::launcher {
namespace {

using algorithms::AdvantageEstimator;
using algorithms::AlgorithmOptions;

TEST(ExperimentConfigTest, AlgorithmDefaultsAreSlimes) {
  Config config = load_config(experiment_schema(), "", {});
  AlgorithmOptions options = AlgorithmOptions::from_config(config);
  EXPECT_EQ(options.advantage.estimator, AdvantageEstimator::kGrpo);
  EXPECT_TRUE(options.advantage.rewards_normalization);
  EXPECT_TRUE(options.advantage.grpo_std_normalization);
  EXPECT_FALSE(options.advantage.normalize_advantages);
  EXPECT_DOUBLE_EQ(options.advantage.kl_coef, 0.0);
  EXPECT_DOUBLE_EQ(options.advantage.gamma, 1.0);
  EXPECT_DOUBLE_EQ(options.advantage.lambd, 1.0);
  EXPECT_EQ(options.policy_loss.kind, algorithms::PolicyLossKind::kPpoClip);
  EXPECT_DOUBLE_EQ(options.policy_loss.eps_clip, 0.2);
  EXPECT_DOUBLE_EQ(options.policy_loss.eps_clip_high, 0.2);
  EXPECT_DOUBLE_EQ(options.policy_loss.eps_clip_c, 0.0);
  EXPECT_FALSE(options.policy_loss.use_kl_loss);
  EXPECT_EQ(options.policy_loss.kl_loss_type, algorithms::KlEstimator::kK1);
  EXPECT_FALSE(options.policy_loss.mismatch.use_tis);
  EXPECT_DOUBLE_EQ(options.policy_loss.mismatch.tis_clip, 2.0);
  EXPECT_DOUBLE_EQ(options.policy_loss.mismatch.tis_clip_low, 0.0);
  EXPECT_FALSE(options.policy_loss.use_opsm);
  EXPECT_DOUBLE_EQ(options.policy_loss.opsm_delta, 1e-4);
  EXPECT_DOUBLE_EQ(options.value_loss.value_clip, 0.2);
  EXPECT_EQ(options.loss_aggregation, algorithms::LossAggregation::kSequenceMeanTokenMean);
  EXPECT_EQ(config.get<int64_t>("max_tokens_per_gpu"), 16384);
  EXPECT_FALSE(config.get<bool>("use_dynamic_batch_size"));
  EXPECT_FALSE(config.get<bool>("balance_data"));
}

TEST(ExperimentConfigTest, AlgorithmSlimeFlagNames) {
  Config config = load_config(experiment_schema(), "",
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
                               "seq-mean-token-sum",
                               "--max-tokens-per-gpu",
                               "8192",
                               "--use-dynamic-batch-size",
                               "--balance-data"});
  AlgorithmOptions options = AlgorithmOptions::from_config(config);
  EXPECT_EQ(options.advantage.estimator, AdvantageEstimator::kGspo);
  EXPECT_EQ(options.policy_loss.kind, algorithms::PolicyLossKind::kGspo);
  EXPECT_FALSE(options.advantage.grpo_std_normalization);
  EXPECT_TRUE(options.advantage.normalize_advantages);
  EXPECT_DOUBLE_EQ(options.policy_loss.eps_clip, 3e-4);
  EXPECT_DOUBLE_EQ(options.policy_loss.eps_clip_high, 4e-4);
  EXPECT_DOUBLE_EQ(options.policy_loss.eps_clip_c, 3.0);
  EXPECT_TRUE(options.policy_loss.use_kl_loss);
  EXPECT_DOUBLE_EQ(options.policy_loss.kl_loss_coef, 0.01);
  EXPECT_EQ(options.policy_loss.kl_loss_type, algorithms::KlEstimator::kLowVarKl);
  EXPECT_TRUE(options.policy_loss.use_unbiased_kl);
  EXPECT_DOUBLE_EQ(options.policy_loss.entropy_coef, 0.001);
  EXPECT_TRUE(options.policy_loss.mismatch.use_tis);
  EXPECT_DOUBLE_EQ(options.policy_loss.mismatch.tis_clip, 3.0);
  EXPECT_DOUBLE_EQ(options.policy_loss.mismatch.tis_clip_low, 0.5);
  EXPECT_EQ(options.policy_loss.mismatch.level, algorithms::TisLevel::kGeometric);
  EXPECT_EQ(options.policy_loss.mismatch.mode, algorithms::TisMode::kMask);
  EXPECT_TRUE(options.policy_loss.mismatch.get_mismatch_metrics);
  EXPECT_TRUE(options.policy_loss.use_opsm);
  EXPECT_DOUBLE_EQ(options.policy_loss.opsm_delta, 0.01);
  EXPECT_DOUBLE_EQ(options.value_loss.value_clip, 0.5);
  EXPECT_EQ(options.loss_aggregation, algorithms::LossAggregation::kSequenceMeanTokenSum);
  EXPECT_EQ(config.get<int64_t>("max_tokens_per_gpu"), 8192);
  EXPECT_TRUE(config.get<bool>("use_dynamic_batch_size"));
  EXPECT_TRUE(config.get<bool>("balance_data"));

  // Unset, the upper clip follows --eps-clip as in Slime.
  Config symmetric = load_config(experiment_schema(), "", {"--eps-clip", "0.1"});
  EXPECT_DOUBLE_EQ(AlgorithmOptions::from_config(symmetric).policy_loss.eps_clip_high, 0.1);
  Config ppo = load_config(
      experiment_schema(), "",
      {"--advantage-estimator", "ppo", "--kl-coef", "0.05", "--gamma", "0.99", "--lambd", "0.95"});
  AlgorithmOptions ppo_options = AlgorithmOptions::from_config(ppo);
  EXPECT_EQ(ppo_options.advantage.estimator, AdvantageEstimator::kPpo);
  EXPECT_DOUBLE_EQ(ppo_options.advantage.kl_coef, 0.05);
  EXPECT_DOUBLE_EQ(ppo_options.advantage.gamma, 0.99);
  EXPECT_DOUBLE_EQ(ppo_options.advantage.lambd, 0.95);
}

TEST(ExperimentConfigTest, AlgorithmContradictionsAreReported) {
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
  EXPECT_CONTAINS(error_of({"--max-tokens-per-gpu", "0"}), "expected an integer >= 1");
  EXPECT_CONTAINS(error_of({"--advantage-estimator", "reinforce"}), "expected one of {grpo");
  EXPECT_CONTAINS(error_of({"--loss-aggregation", "sum"}), "seq-mean-token-sum");
}

}  // namespace
}  // namespace ooze::launcher
