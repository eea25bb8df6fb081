// Every RL-algorithm option of an experiment, read from its config (section "algorithm" of
// launcher/experiment_config.cpp, Slime's flag names), for the trainer to hand to the estimators
// and losses:
//
//   AlgorithmOptions algorithm = AlgorithmOptions::from_config(config);
//   AdvantageResult result = compute_advantages(inputs, algorithm.advantage);
//   LossScale scale{algorithm.loss_aggregation, global_tokens, global_sequences, dp_size};
//   LossOutput out = policy_loss(micro_batch, algorithm.policy_loss, scale);
#pragma once

#include "algorithms/advantages.h"
#include "algorithms/loss_aggregation.h"
#include "algorithms/policy_loss.h"
#include "algorithms/value_loss.h"
#include "core/config.h"

namespace ooze::algorithms {

struct AlgorithmOptions {
  AdvantageOptions advantage;
  PolicyLossOptions policy_loss;
  ValueLossOptions value_loss;
  LossAggregation loss_aggregation = LossAggregation::kSequenceMeanTokenMean;  // --loss-aggregation

  static AlgorithmOptions from_config(const Config& config);
};

}  // namespace ooze::algorithms
