#include "algorithms/algorithm_options.h"

namespace ooze::algorithms {

AlgorithmOptions AlgorithmOptions::from_config(const Config& config) {
  AlgorithmOptions options;
  options.advantage = AdvantageOptions::from_config(config);
  options.policy_loss = PolicyLossOptions::from_config(config);
  options.value_loss = ValueLossOptions::from_config(config);
  options.loss_aggregation = parse_loss_aggregation(config.get<std::string>("loss_aggregation"));
  return options;
}

}  // namespace ooze::algorithms
