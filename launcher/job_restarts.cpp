#include "launcher/job_restarts.h"

#include <algorithm>

#include "fsdp/checkpoint.h"

namespace ooze::launcher {

void report_dead_actors(const std::string& command, const std::string& error,
                        const std::vector<actors::ActorInfo>& deaths, std::ostream& err) {
  for (const actors::ActorInfo& dead : deaths) {
    if (error.find(dead.actor_id) != std::string::npos) continue;  // the error names it
    err << "ooze " << command << ": "
        << actors::ActorDiedError(dead.label, dead.death_reason, dead.actor_id, dead.pid).what()
        << std::endl;
  }
}

bool trainer_died(const std::vector<actors::ActorInfo>& deaths) {
  return std::any_of(deaths.begin(), deaths.end(),
                     [](const actors::ActorInfo& dead) { return dead.class_name == "TrainActor"; });
}

Config restart_config(const ConfigSchema& schema, const std::vector<std::string>& args,
                      const std::string& save_dir, int64_t restart, int64_t max_restarts,
                      std::ostream& err) {
  err << "ooze train: restart " << restart << " of " << max_restarts << ": ";
  const std::optional<int64_t> iteration = fsdp::latest_checkpoint_iteration(save_dir);
  if (!iteration) {
    err << "no checkpoint in " << save_dir << " yet, the run starts over" << std::endl;
    return *load_config_from_command_line(schema, args);
  }
  err << "the run starts again from the checkpoint of iteration " << *iteration << " in "
      << save_dir << std::endl;
  // Later flags win: these replace whatever the command line said about loading (a --load of
  // another run's weights without its optimizer, a --ckpt-step), so that the run continues as
  // it would have without the failure.
  std::vector<std::string> resumed = args;
  for (const char* flag : {"--load", save_dir.c_str(), "--ckpt-step", "-1", "--load-optim", "true",
                           "--load-rng", "true"}) {
    resumed.push_back(flag);
  }
  return *load_config_from_command_line(schema, resumed);
}

}  // namespace ooze::launcher
