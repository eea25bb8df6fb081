#include "rollout/rollout_options.h"

namespace ooze::rollout {

void add_rollout_fields(ConfigSchema& schema) {
  schema.section("rollout");
  schema.add_int("rollout_batch_size", 32, "Prompts (groups) per rollout.").min(1);
  schema.add_int("n_samples_per_prompt", 8, "Samples per prompt.").min(1);
  schema
      .add_int("over_sampling_batch_size", 0,
               "Prompts started per round of dynamic sampling; 0: the rollout batch size.")
      .min(0);
  schema.add_string("dynamic_sampling_filter_path", "",
                    "Drop finished groups: nonzero_std (rewards that all agree), or "
                    "lib.so:function; empty: keep every group.");
  schema
      .add_int("dynamic_sampling_max_rounds", 16,
               "Rounds of over-sampling a rollout may draw before it gives up.")
      .min(1);
  schema.add_bool("partial_rollout", false,
                  "Keep aborted groups and continue them in the next rollout.");
  schema.add_string(
      "buffer_filter_path", "",
      "lib.so:function choosing the buffered groups a rollout continues; empty: oldest first.");
  schema.add_string("custom_generate_function_path", "",
                    "lib.so:function generating each sample (multi-turn, tools).");
  schema.add_int("rollout_concurrency", 512, "Engine requests in flight at once.").min(1);
  schema
      .add_double("rollout_progress_interval", 30.0,
                  "Seconds between progress lines of a rollout; 0: none.")
      .min(0);
  add_rollout_sampling_fields(schema);
  schema.add_check("over_sampling", [](const Config& config) -> std::string {
    const int64_t over = config.get<int64_t>("over_sampling_batch_size");
    const int64_t batch = config.get<int64_t>("rollout_batch_size");
    if (over != 0 && over < batch) {
      return "over_sampling_batch_size = " + std::to_string(over) +
             " is smaller than rollout_batch_size = " + std::to_string(batch);
    }
    return "";
  });
}

RolloutOptions RolloutOptions::from_config(const Config& config) {
  RolloutOptions options;
  options.rollout_batch_size = config.get<int64_t>("rollout_batch_size");
  options.n_samples_per_prompt = config.get<int64_t>("n_samples_per_prompt");
  options.over_sampling_batch_size = config.get<int64_t>("over_sampling_batch_size");
  options.dynamic_sampling_filter_path = config.get<std::string>("dynamic_sampling_filter_path");
  options.dynamic_sampling_max_rounds = config.get<int64_t>("dynamic_sampling_max_rounds");
  options.partial_rollout = config.get<bool>("partial_rollout");
  options.buffer_filter_path = config.get<std::string>("buffer_filter_path");
  options.custom_generate_function_path = config.get<std::string>("custom_generate_function_path");
  options.concurrency = config.get<int64_t>("rollout_concurrency");
  options.progress_interval_s = config.get<double>("rollout_progress_interval");
  options.sampling = RolloutSampling::from_config(config);
  return options;
}

void add_eval_fields(ConfigSchema& schema) {
  schema.section("eval");
  schema.add_string_list("eval_prompt_data", {},
                         "Evaluation datasets as NAME,FILE pairs (name1,file1,name2,file2).");
  schema.add_int("eval_interval", 0, "Evaluate every this many rollouts; 0: never.").min(0);
  schema.add_int("n_samples_per_eval_prompt", 1, "Samples per evaluation prompt.").min(1);
  schema.add_bool("log_passrate", false, "Report pass@k (k = 1, 2, 4, ...) per eval dataset.");
  schema.add_check("eval_prompt_data_pairs", [](const Config& config) -> std::string {
    const auto pairs = config.get<std::vector<std::string>>("eval_prompt_data");
    if (pairs.size() % 2 != 0) {
      return "eval_prompt_data must list NAME,FILE pairs; got " + std::to_string(pairs.size()) +
             " entries";
    }
    return "";
  });
}

EvalOptions EvalOptions::from_config(const Config& config, const PromptDatasetOptions& data) {
  EvalOptions options;
  const auto pairs = config.get<std::vector<std::string>>("eval_prompt_data");
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    EvalDataset dataset{pairs[i], data};
    dataset.options.path = pairs[i + 1];
    dataset.options.flags.path = "--eval-prompt-data " + pairs[i];
    options.datasets.push_back(std::move(dataset));
  }
  options.eval_interval = config.get<int64_t>("eval_interval");
  options.n_samples_per_eval_prompt = config.get<int64_t>("n_samples_per_eval_prompt");
  options.log_passrate = config.get<bool>("log_passrate");
  options.sampling = RolloutSampling::eval_from_config(config);
  return options;
}

}  // namespace ooze::rollout
