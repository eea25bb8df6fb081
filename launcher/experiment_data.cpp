#include "launcher/experiment_data.h"

#include "rollout/reward_label_check.h"

namespace ooze::launcher {

ExperimentData ExperimentData::load(const Config& config) {
  ExperimentData data{
      models::load_tokenizer(config.get<std::string>("hf_checkpoint")), nullptr, {}, {}, {}};
  const rollout::PromptDatasetOptions options =
      rollout::PromptDatasetOptions::fields().read(config);
  data.prompts = std::make_shared<const rollout::PromptDataset>(options, data.tokenizer);
  data.eval_options = rollout::EvalOptions::from_config(config, options);
  for (const rollout::EvalDataset& eval : data.eval_options.datasets) {
    data.eval_data.push_back(
        std::make_unique<rollout::PromptDataset>(eval.options, data.tokenizer));
    data.eval_datasets.emplace_back(eval.name, data.eval_data.back().get());
  }
  return data;
}

void ExperimentData::check_reward_labels(const rollout::RewardModel& rewards,
                                         const rollout::RolloutOptions& rollout) const {
  if (!rollout.rollout_function_path.empty() || !rollout.data_source_path.empty()) return;
  rollout::check_reward_labels(rewards, *prompts);
  if (!rollout.eval_function_path.empty()) return;
  for (const auto& [name, dataset] : eval_datasets) rollout::check_reward_labels(rewards, *dataset);
}

}  // namespace ooze::launcher
