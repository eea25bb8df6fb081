// `ooze rollout`: rollouts and evaluations without training (Slime's --debug-rollout-only), for
// checking data, rewards, filters and generate plugins against a real model before a run.
//
//   ooze rollout --hf-checkpoint DIR --prompt-data train.jsonl --rm-type math
//                [--engine-urls http://127.0.0.1:30000,...]   (else --rollout-num-engines local
//                ones)
//                [--num-rollout 2] [--save-debug-rollout-data out/rollout_{rollout_id}.jsonl]
//                [--eval-prompt-data aime,aime.jsonl --eval-interval 1] [any rollout flag]
//
// Without --engine-urls it starts --rollout-num-engines engines on the model in this process,
// each behind its own HTTP server on loopback, and reaches them through the router exactly as
// the RL loop does. Prints one JSON line of metrics per rollout (and per evaluation), with
// "rollout_id"; --save-debug-rollout-data writes every kept sample as a JSON line.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "core/config.h"

namespace ooze::launcher {

// Its flags.
const ConfigSchema& rollout_schema();

// `args` are the arguments after "rollout". Returns the exit code; throws ConfigError for bad
// flags and the data, plugin and engine errors of the modules it runs.
int run_rollout_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace ooze::launcher
