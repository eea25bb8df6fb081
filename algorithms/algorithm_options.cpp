#include "algorithms/algorithm_options.h"

#include <sstream>

#include "core/error.h"

namespace ooze::algorithms {
namespace {

// Shortest form of a number ("0.1", not "0.100000"), as the user typed it.
std::string text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

bool puts_kl_in_rewards(AdvantageEstimator estimator) {
  return estimator == AdvantageEstimator::kPpo ||
         estimator == AdvantageEstimator::kReinforcePlusPlus ||
         estimator == AdvantageEstimator::kReinforcePlusPlusBaseline;
}

}  // namespace

AlgorithmOptions AlgorithmOptions::from_config(const Config& config) {
  AlgorithmOptions options;
  options.advantage = AdvantageOptions::from_config(config);
  options.policy_loss = PolicyLossOptions::from_config(config);
  options.value_loss = ValueLossOptions::from_config(config);
  options.validate();
  return options;
}

void AlgorithmOptions::validate() const {
  policy_loss.validate();
  const double kl_coef = advantage.kl_coef;
  if (policy_loss.use_kl_loss && kl_coef != 0) {
    throw ConfigError("use_kl_loss = true together with kl_coef = " + text(kl_coef) +
                      ": the KL is either a loss term (--use-kl-loss --kl-loss-coef) or a reward "
                      "penalty (--kl-coef), never both; drop one of them");
  }
  if (kl_coef != 0 && !puts_kl_in_rewards(advantage.estimator)) {
    throw ConfigError("kl_coef = " + text(kl_coef) + " has no effect with advantage_estimator = " +
                      advantage_estimator_name(advantage.estimator) +
                      ": only ppo and the reinforce_plus_plus estimators put a KL penalty in the "
                      "rewards; use --use-kl-loss --kl-loss-coef instead");
  }
  if (!policy_loss.use_kl_loss && policy_loss.kl_loss_coef != 0) {
    throw ConfigError("kl_loss_coef = " + text(policy_loss.kl_loss_coef) +
                      " has no effect without use_kl_loss = true: add --use-kl-loss");
  }
  if (!policy_loss.use_kl_loss && policy_loss.use_unbiased_kl) {
    throw ConfigError(
        "use_unbiased_kl = true has no effect without use_kl_loss = true: add --use-kl-loss");
  }
}

void add_algorithm_fields(ConfigSchema& schema) {
  schema.section("algorithm");
  schema.add_enum("advantage_estimator",
                  {"grpo", "gspo", "cispo", "rloo", "reinforce_plus_plus",
                   "reinforce_plus_plus_baseline", "ppo"},
                  "grpo",
                  "Advantage estimator; gspo and cispo use grpo's advantages with the GSPO "
                  "(sequence-level ratio) and CISPO policy losses.");
  schema.add_bool("disable_rewards_normalization", false,
                  "Do not subtract the group mean reward (grpo, gspo, cispo, "
                  "reinforce_plus_plus_baseline).");
  schema.add_bool("disable_grpo_std_normalization", false,
                  "Do not divide by the group's reward std (Dr.GRPO).");
  schema.add_bool("normalize_advantages", false,
                  "Whiten advantages over the step's response tokens across data-parallel ranks "
                  "(always done for the reinforce_plus_plus estimators).");
  schema.add_double("gamma", 1.0, "Discount of ppo (GAE) and reinforce_plus_plus returns.")
      .min(0)
      .max(1);
  schema.add_double("lambd", 1.0, "GAE lambda of ppo.").min(0).max(1);
  schema
      .add_double("kl_coef", 0.0,
                  "KL penalty in the token rewards (ppo, reinforce_plus_plus estimators).")
      .min(0);
  schema.add_bool("use_kl_loss", false, "Add KL(policy || reference) to the loss (GRPO).");
  schema.add_double("kl_loss_coef", 0.0, "Coefficient of the KL loss.").min(0);
  schema.add_enum("kl_loss_type", {"k1", "k2", "k3", "low_var_kl"}, "k1",
                  "KL estimator of the KL loss and of the kl_coef reward penalty.");
  schema.add_bool("use_unbiased_kl", false,
                  "Weight the KL loss by the current/old policy ratio (unbiased KL).");
  schema.add_double("eps_clip", 0.2, "PPO clip: the ratio's lower bound is 1 - eps_clip.")
      .greater_than(0);
  schema
      .add_double("eps_clip_high", 0.0,
                  "PPO clip: the ratio's upper bound is 1 + eps_clip_high (DAPO's clip-higher); "
                  "0 means eps_clip.")
      .min(0);
  schema
      .add_double("eps_clip_c", 0.0,
                  "Dual-clip PPO bound (> 1) on the loss of negative advantages; 0 turns it off.")
      .min(0);
  schema.add_double("entropy_coef", 0.0, "Entropy bonus coefficient.").min(0);
  schema.add_bool("use_tis", false,
                  "Weight the policy loss by the train/inference importance ratio (TIS).");
  schema.add_double("tis_clip", 2.0, "Upper bound of the TIS ratio.").greater_than(0);
  schema.add_double("tis_clip_low", 0.0, "Lower bound of the TIS ratio.").min(0);
  schema.add_enum("tis_level", {"token", "sequence", "geometric"}, "token",
                  "TIS ratio per token, per sequence (product), or per sequence geometric mean.");
  schema.add_enum("tis_mode", {"clip", "mask"}, "clip",
                  "Ratios outside the TIS bounds are clipped (truncated IS) or masked (icepop).");
  schema.add_bool("get_mismatch_metrics", false,
                  "Log train/inference log-prob mismatch metrics without --use-tis.");
  schema.add_bool("use_opsm", false,
                  "Off-policy sequence masking: drop negative-advantage samples whose policy "
                  "drifted by more than opsm_delta.");
  schema.add_double("opsm_delta", 1e-4, "OPSM threshold on the mean old/current log-ratio.").min(0);
  schema.add_double("value_clip", 0.2, "Clip of the critic's value change (ppo).").greater_than(0);

  schema.add_check("algorithm_options", [](const Config& config) {
    try {
      AlgorithmOptions::from_config(config);
    } catch (const ConfigError& error) {
      return std::string(error.what());
    }
    return std::string();
  });
}

}  // namespace ooze::algorithms
