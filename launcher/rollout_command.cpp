#include "launcher/rollout_command.h"

#include <iostream>
#include <memory>
#include <optional>

#include "core/config.h"
#include "core/logging.h"
#include "launcher/commands.h"
#include "launcher/debug_rollout_data.h"
#include "launcher/experiment_data.h"
#include "launcher/slime_flags.h"
#include "python/hook_args.h"
#include "rollout/prompt_source.h"
#include "rollout/reward_model.h"
#include "rollout/rollout_functions.h"
#include "rollout/rollout_manager.h"
#include "serving/local_engines.h"
#include "serving/router.h"

namespace ooze::launcher {
namespace {

ConfigSchema build_rollout_schema() {
  ConfigSchema schema;
  schema.section("model");
  schema.add_string("hf_checkpoint", "", "Hugging Face model directory (tokenizer; local engines).")
      .required();
  schema.section("engines");
  schema.add_string_list("engine_urls", {},
                         "Engine servers (ooze serve) to use; empty: start local engines.");
  schema.add_int("rollout_num_engines", 1, "Local engines to start when no URL is given.").min(1);
  engine::EngineOptions::launched_engine_fields().declare(schema,
                                                          engine::launched_engine_defaults());
  schema.section("output");
  schema.add_string("save_debug_rollout_data", "",
                    "Write each rollout's kept samples as JSON lines; {rollout_id} in the path "
                    "is replaced.");
  rollout::add_prompt_data_fields(schema);
  rollout::RolloutOptions::fields().declare(schema);
  rollout::RewardOptions::fields().declare(schema);
  rollout::add_eval_fields(schema);
  add_slime_flags(schema);
  return schema;
}

}  // namespace

const ConfigSchema& rollout_schema() {
  static const ConfigSchema schema = build_rollout_schema();
  return schema;
}

int run_rollout_command(const std::vector<std::string>& args, std::ostream& out) {
  const std::optional<Config> config = load_config_from_command_line(rollout_schema(), args);
  if (!config) {
    out << command_help("rollout");
    return 0;
  }
  // Everything that can be refused is checked before any engine starts.
  const std::string model_dir = config->get<std::string>("hf_checkpoint");
  const ExperimentData data = ExperimentData::load(*config);
  python::set_hook_args(config->to_json());
  rollout::RewardOptions reward_options = rollout::RewardOptions::fields().read(*config);
  reward_options.environment_rewards = !config->get<std::string>("env_url").empty();
  rollout::RewardModel rewards(reward_options);
  const rollout::RolloutOptions rollout_options = rollout::RolloutOptions::fields().read(*config);
  data.check_reward_labels(rewards, rollout_options);
  // Loaded here to fail before any engine starts; the rollout manager loads them again.
  rollout::RolloutFunctions::load(rollout_options, rewards);
  const int64_t num_rollout =
      rollout::num_rollouts(*config, data.prompts->size(), rollout_options.rollout_batch_size);
  if (rollout_options.data_source_path.empty()) {
    if (auto note =
            rollout::rollout_epochs_note(*data.prompts, rollout_options.rollout_batch_size)) {
      OOZE_LOG(INFO) << *note;
    }
  }
  const std::string save_pattern = config->get<std::string>("save_debug_rollout_data");

  // Running engines (ooze serve) when given, else local ones behind servers on loopback.
  std::unique_ptr<serving::LocalEngines> local;
  std::unique_ptr<serving::Router> remote;
  const auto engine_urls = config->get<std::vector<std::string>>("engine_urls");
  if (engine_urls.empty()) {
    engine::EngineOptions engine = engine::EngineOptions::launched_engine_fields().read(
        *config, engine::launched_engine_defaults());
    engine.model_dir = model_dir;
    local = std::make_unique<serving::LocalEngines>(
        engine, static_cast<int>(config->get<int64_t>("rollout_num_engines")));
  } else {
    serving::RouterOptions router_options;
    router_options.engine_urls = engine_urls;
    remote = std::make_unique<serving::Router>(router_options);
  }
  serving::Router& router = local ? local->router() : *remote;
  rollout::PromptSource source(data.prompts, rollout::PromptSourceOptions::fields().read(*config));
  rollout::RolloutManager manager(rollout_options, source, router, data.tokenizer, rewards);

  auto evaluate = [&](int64_t rollout_id) {
    nlohmann::json line =
        manager.evaluate(data.eval_datasets, data.eval_options, rollout_id).metrics;
    line["rollout_id"] = rollout_id;
    out << line.dump() << std::endl;
  };
  for (int64_t rollout_id = 0; rollout_id < num_rollout; ++rollout_id) {
    if (!data.eval_datasets.empty() && data.eval_options.eval_interval > 0 &&
        rollout_id % data.eval_options.eval_interval == 0) {
      evaluate(rollout_id);
    }
    rollout::RolloutResult result = manager.generate(rollout_id);
    if (!save_pattern.empty()) {
      save_debug_rollout_data(debug_rollout_path(save_pattern, rollout_id), result.groups);
    }
    nlohmann::json line = result.metrics;
    line["rollout_id"] = rollout_id;
    out << line.dump() << std::endl;
  }
  if (!data.eval_datasets.empty() && data.eval_options.eval_interval > 0) evaluate(num_rollout);
  return 0;
}

}  // namespace ooze::launcher
