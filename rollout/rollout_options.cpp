#include "rollout/rollout_options.h"

#include "core/error.h"

namespace ooze::rollout {

const OptionFields<RolloutOptions>& RolloutOptions::fields() {
  using O = RolloutOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("rollout");
    f.add("rollout_batch_size", &O::rollout_batch_size, "Prompts (groups) per rollout.").min(1);
    f.add("n_samples_per_prompt", &O::n_samples_per_prompt, "Samples per prompt.").min(1);
    f.add("over_sampling_batch_size", &O::over_sampling_batch_size,
          "Prompts started per round of dynamic sampling; 0: the rollout batch size.")
        .min(0);
    f.add("dynamic_sampling_filter_path", &O::dynamic_sampling_filter_path,
          "Drop finished groups: nonzero_std (rewards that all agree), your function "
          "(pkg.mod.fn or file.py:fn, (args, samples) -> DynamicFilterOutput | bool), or "
          "lib.so:function; empty: keep every group.");
    f.add("dynamic_sampling_max_rounds", &O::dynamic_sampling_max_rounds,
          "Rounds of over-sampling a rollout may draw before it gives up.")
        .min(1);
    f.add("partial_rollout", &O::partial_rollout,
          "Keep aborted groups and continue them in the next rollout.");
    f.add("buffer_filter_path", &O::buffer_filter_path,
          "Your function choosing the buffered groups a rollout continues (pkg.mod.fn or "
          "file.py:fn, (args, rollout_id, buffer, num_samples) -> groups, or lib.so:function); "
          "empty: oldest first.");
    f.add("custom_generate_function_path", &O::custom_generate_function_path,
          "Your function generating each sample (multi-turn, tools): pkg.mod.fn or file.py:fn, "
          "async (args, sample, sampling_params) -> Sample, or lib.so:function.");
    f.add("rollout_function_path", &O::rollout_function_path,
          "Your function making a whole rollout (pkg.mod.fn or file.py:fn, (args, rollout_id, "
          "data_source, evaluation=False) -> RolloutFnTrainOutput or groups); sft: each "
          "prompt's --label-key text is its response (ooze train, with --loss-type sft_loss; no "
          "engine); empty: ooze's rollout.");
    f.add("eval_function_path", &O::eval_function_path,
          "Your function making evaluations, called as the rollout function with "
          "evaluation=True (-> RolloutFnEvalOutput); empty: --rollout-function-path if it is "
          "yours, else ooze's evaluation of --eval-prompt-data.");
    f.add("data_source_path", &O::data_source_path,
          "Your class handing out prompts (pkg.mod.Class or file.py:Class, built as "
          "Class(args); get_samples(n) -> groups, add_samples(groups), save(rollout_id), "
          "load(rollout_id)); empty: --prompt-data.");
    f.add("rollout_all_samples_process_path", &O::rollout_all_samples_process_path,
          "Your function seeing every finished group of a rollout, those dynamic sampling "
          "dropped included ((args, groups, data_source) -> None).");
    f.add("agent_command", &O::agent_command,
          "Your agent program, run once per sample (sh -c COMMAND) against an OpenAI-compatible "
          "session that records its exact tokens: OPENAI_BASE_URL and OPENAI_API_KEY in its "
          "environment, the sample as a JSON line on stdin; a {\"reward\": R} line on stdout "
          "is the sample's reward.");
    f.add("agent_timeout", &O::agent_timeout_s,
          "Seconds an agent of --agent-command may run before it is killed (its sample is then "
          "aborted).")
        .greater_than(0);
    f.add("session_host", &O::session_host,
          "Address the agents' session server listens on (0.0.0.0 for agents on other "
          "machines).");
    f.add("env_url", &O::env_url,
          "An environment server (OpenEnv style: POST /reset, POST /step) that ooze's loop plays "
          "each sample against: the policy's turns are the actions, the observations are "
          "appended with loss mask 0, the episode's return is the reward.");
    f.add("env_max_turns", &O::env_max_turns, "Steps of an --env-url episode at most.").min(1);
    f.add("env_timeout", &O::env_timeout_s,
          "Seconds an --env-url reset or step may take before the sample is aborted.")
        .greater_than(0);
    f.add("rollout_concurrency", &O::concurrency,
          "Engine requests (or generate-function calls, or agents) in flight at once.")
        .min(1);
    f.add("rollout_progress_interval", &O::progress_interval_s,
          "Seconds between progress lines of a rollout; 0: none.")
        .min(0);
    f.include("sampling", &O::sampling, RolloutSampling::fields());
    f.add_rule([](const O& options) {
      const int64_t over = options.over_sampling_batch_size;
      if (over != 0 && over < options.rollout_batch_size) {
        throw ConfigError(
            "over_sampling_batch_size = " + std::to_string(over) +
            " is smaller than rollout_batch_size = " + std::to_string(options.rollout_batch_size));
      }
    });
    return f;
  }();
  return fields;
}

const OptionFields<EvalOptions>& EvalOptions::fields() {
  using O = EvalOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("eval");
    f.add_custom(
        "eval_prompt_data", FieldType::kStringList,
        [](const O& o) {
          std::vector<std::string> pairs;
          for (const EvalDataset& dataset : o.datasets) {
            pairs.push_back(dataset.name);
            pairs.push_back(dataset.options.path);
          }
          return nlohmann::json(pairs);
        },
        [](const nlohmann::json& value, O& o) {
          const auto pairs = value.get<std::vector<std::string>>();
          if (pairs.size() % 2 != 0) {
            throw ConfigError("eval_prompt_data must list NAME,FILE pairs; got " +
                              std::to_string(pairs.size()) + " entries");
          }
          o.datasets.clear();
          for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
            EvalDataset dataset{pairs[i], {}};
            dataset.options.path = pairs[i + 1];
            o.datasets.push_back(std::move(dataset));
          }
        },
        "Evaluation datasets as NAME,FILE pairs (name1,file1,name2,file2).");
    f.add("eval_interval", &O::eval_interval, "Evaluate every this many rollouts; 0: never.")
        .min(0);
    f.add("n_samples_per_eval_prompt", &O::n_samples_per_eval_prompt,
          "Samples per evaluation prompt.")
        .min(1);
    f.add("log_passrate", &O::log_passrate, "Report pass@k (k = 1, 2, 4, ...) per eval dataset.");
    return f;
  }();
  return fields;
}

void add_eval_fields(ConfigSchema& schema) {
  EvalOptions::fields().declare(schema);
  add_eval_sampling_fields(schema);
}

EvalOptions EvalOptions::from_config(const Config& config, const PromptDatasetOptions& data) {
  EvalOptions options = fields().read(config);
  for (EvalDataset& dataset : options.datasets) {
    const std::string path = dataset.options.path;
    dataset.options = data;
    dataset.options.path = path;
    dataset.options.flags.path = "--eval-prompt-data " + dataset.name;
  }
  options.sampling = RolloutSampling::eval_from_config(config);
  return options;
}

}  // namespace ooze::rollout
