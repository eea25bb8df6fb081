// Every RL-algorithm option of an experiment (Slime's flag names and defaults), declared here
// beside the code that reads them, for the trainer to hand to the estimators and losses:
//
//   add_algorithm_fields(schema);            // section "algorithm"
//   AlgorithmOptions algorithm = AlgorithmOptions::from_config(config);
//   AdvantageResult result = compute_advantages(inputs, algorithm.advantage);
//   LossScale scale{aggregation, global_tokens, global_sequences, dp_size};
//   LossOutput out = policy_loss(micro_batch, algorithm.policy_loss, scale);
//
// How the step's loss is aggregated (--loss-aggregation) is the trainer's, for every loss:
// add_loss_aggregation_field in loss_aggregation.h.
#pragma once

#include "algorithms/advantages.h"
#include "algorithms/on_policy_distillation.h"
#include "algorithms/policy_loss.h"
#include "algorithms/value_loss.h"
#include "core/config.h"

namespace ooze::algorithms {

struct AlgorithmOptions {
  AdvantageOptions advantage;
  PolicyLossOptions policy_loss;
  ValueLossOptions value_loss;
  OpdOptions opd;  // on-policy distillation (--use-opd)

  // Reads the fields add_algorithm_fields declares; throws ConfigError as validate() does.
  static AlgorithmOptions from_config(const Config& config);
  // Every rule relating the fields to each other (each option struct's own, and the KL's place:
  // a loss term or a reward penalty, never both). Throws ConfigError naming the flags.
  void validate() const;
};

// Declares the "algorithm" section, with one check that runs AlgorithmOptions::validate, so a
// contradictory experiment is refused before any process starts, with the same message as code
// that builds the options by hand gets.
void add_algorithm_fields(ConfigSchema& schema);

}  // namespace ooze::algorithms
