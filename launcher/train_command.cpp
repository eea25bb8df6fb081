#include "launcher/train_command.h"

#include <exception>
#include <iostream>
#include <optional>
#include <ostream>

#include "actors/runtime.h"
#include "core/config.h"
#include "core/logging.h"
#include "launcher/commands.h"
#include "launcher/experiment_data.h"
#include "launcher/job_restarts.h"
#include "launcher/rl_loop.h"
#include "launcher/rl_placement.h"
#include "launcher/train_data_hooks.h"
#include "launcher/train_plan.h"
#include "python/hook_args.h"
#include "rollout/prompt_source.h"
#include "rollout/reward_model.h"
#include "rollout/rollout_functions.h"
#include "rollout/rollout_hooks.h"
#include "trainer/python_loss.h"

namespace ooze::launcher {
namespace {

// Stops the runtime, and with it every process of the job, when the run ends. On an error, the
// caller first names the actors that died (the likely cause), then shuts the runtime down.
struct RuntimeGuard {
  ~RuntimeGuard() {
    if (std::uncaught_exceptions() == 0 && actors::is_initialized()) actors::shutdown();
  }
};

// One run of the job: its processes started, the RL loop from `config`'s --load (if any) to the
// last rollout. OUT/config.json is the config of the latest run (a restart's names its --load).
void run_job(const Config& config, const TrainPlan& plan, const ExperimentData& data,
             std::ostream& out) {
  // The rest of the checks, before any process starts.
  python::set_hook_args(config.to_json());
  std::optional<rollout::RewardModel> rewards;
  if (plan.with_engines()) {
    rollout::RewardOptions reward_options = rollout::RewardOptions::fields().read(config);
    reward_options.environment_rewards = !config.get<std::string>("env_url").empty();
    rewards.emplace(reward_options);
    const rollout::RolloutOptions rollout_options = rollout::RolloutOptions::fields().read(config);
    data.check_reward_labels(*rewards, rollout_options);
    // Loaded here to fail before any process starts; the rollout manager loads them again.
    rollout::RolloutFunctions::load(rollout_options, *rewards);
  }
  const rollout::RolloutHooks hooks(rollout::RolloutHookOptions::fields().read(config));
  const TrainDataHooks train_data(TrainDataHookOptions::fields().read(config));
  const trainer::TrainInit init = policy_init(config, plan);
  // A Python loss that cannot load is refused here, not by every trainer rank once started.
  if (plan.with_trainers) trainer::load_python_losses(init.options.step);
  config.save_effective_config(config.get<std::string>("output_dir"));
  RuntimeGuard runtime;
  RlProcesses job = start_rl_processes(config, plan, init);
  RlLoop(config, plan, data, rewards, hooks, train_data, job, init.options, out).run();
}

}  // namespace

int run_train_command(const std::vector<std::string>& args, std::ostream& out) {
  const ConfigSchema& schema = train_schema();
  std::optional<Config> config = load_config_from_command_line(schema, args);
  if (!config) {
    out << command_help("train");
    return 0;
  }
  // What this run changes, as Slime prints its arguments; every field goes to OUT/config.json.
  out << "ooze train: config (what differs from the defaults; all of it in "
      << config->get<std::string>("output_dir") << "/config.json):\n"
      << config->describe_changes() << std::flush;
  // Everything that can be refused is checked before any process starts (here and in run_job).
  check_model_directory(config->get<std::string>("hf_checkpoint"), "--hf-checkpoint");
  const ExperimentData data = ExperimentData::load(*config);
  const TrainPlan plan = TrainPlan::resolve(*config, data.prompts->size());
  if (config->get<std::string>("data_source_path").empty()) {
    const int64_t batch = config->get<int64_t>("rollout_batch_size");
    if (auto note = rollout::rollout_epochs_note(*data.prompts, batch)) {
      OOZE_LOG(INFO) << *note;
    }
  }

  // --max-restarts: a trainer rank's death restarts the job from its last checkpoint (from its
  // start when there is none yet); the restarted run drops the metrics lines of the rollouts it
  // does again (RlLoop::resume).
  for (int64_t restarts = 0;; ++restarts) {
    try {
      run_job(*config, plan, data, out);
      return 0;
    } catch (const std::exception& error) {
      if (restarts == plan.max_restarts) throw;  // main() names the dead and shuts down
      const std::vector<actors::ActorInfo> deaths = actors::dead_actors(kDeathSettle);
      if (!trainer_died(deaths)) throw;
      std::cerr << "ooze train: " << error.what() << std::endl;
      report_dead_actors("train", error.what(), deaths, std::cerr);
      actors::shutdown();
      config = restart_config(schema, args, config->get<std::string>("save"), restarts + 1,
                              plan.max_restarts, std::cerr);
    }
  }
}

}  // namespace ooze::launcher
