// What `ooze rollout` and `ooze train` read before any process starts: the tokenizer of
// --hf-checkpoint, the prompt data and the evaluation datasets, each checked as it loads, so a
// bad file is refused before an engine or a trainer rank exists.
//
//   ExperimentData data = ExperimentData::load(config);
//   RolloutManager manager(options, source_over(data.prompts), router, data.tokenizer, rewards);
//   manager.evaluate(data.eval_datasets, data.eval_options);
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "models/tokenizer.h"
#include "rollout/prompt_dataset.h"
#include "rollout/reward_model.h"
#include "rollout/rollout_options.h"

namespace ooze::launcher {

struct ExperimentData {
  models::Tokenizer tokenizer;
  std::shared_ptr<const rollout::PromptDataset> prompts;
  rollout::EvalOptions eval_options;
  // The evaluation datasets by name, as RolloutManager::evaluate takes them (pointers into
  // eval_data, which owns them).
  std::vector<std::pair<std::string, const rollout::PromptDataset*>> eval_datasets;
  std::vector<std::unique_ptr<rollout::PromptDataset>> eval_data;

  // Reads hf_checkpoint's tokenizer and the fields of add_prompt_data_fields and add_eval_fields.
  static ExperimentData load(const Config& config);

  // Refuses prompt and eval data whose prompts a built-in reward rule would score 0 for want of
  // a label (rollout/reward_label_check.h). Not with a rollout function or a data source of the
  // user's (nor the eval data with an eval function): the samples need not come from this data.
  void check_reward_labels(const rollout::RewardModel& rewards,
                           const rollout::RolloutOptions& rollout) const;
};

}  // namespace ooze::launcher
