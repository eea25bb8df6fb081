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
  options.advantage = AdvantageOptions::fields().read(config);
  options.policy_loss = PolicyLossOptions::fields().read(config);
  options.value_loss = ValueLossOptions::fields().read(config);
  options.opd = OpdOptions::fields().read(config);
  // As Slime: the estimator picks the policy loss.
  options.policy_loss.kind = policy_loss_kind_for(options.advantage.estimator);
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
  AdvantageOptions::fields().declare(schema);
  PolicyLossOptions::fields().declare(schema);
  ValueLossOptions::fields().declare(schema);
  OpdOptions::fields().declare(schema);

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
