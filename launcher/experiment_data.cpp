#include "launcher/experiment_data.h"

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

}  // namespace ooze::launcher
