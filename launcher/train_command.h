// `ooze train`: the RL loop, with Slime's flags.
//
//   ooze train --hf-checkpoint DIR --prompt-data train.jsonl --rm-type math --output-dir OUT
//              [--actor-num-gpus-per-node 2] [--rollout-num-gpus 2] [--colocate]
//              [--num-rollout 10] [--global-batch-size 16] [any rollout, algorithm, optimizer,
//              weight-sync flag]
//
// The flags and the checks made before any process starts are launcher/train_plan.h's; where
// the processes run, launcher/rl_placement.h's; the loop itself, launcher/rl_loop.h's. The
// effective config is saved as OUT/config.json before anything starts.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ooze::launcher {

// `args` are the arguments after "train". Returns the exit code; throws ConfigError for bad
// flags and the errors of the modules it runs.
int run_train_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace ooze::launcher
