// `ooze reward`: scores JSON lines from stdin with the reward a run would use, one answer line
// per input line, in order — for checking a dataset's labels against a reward type, or your
// own reward function, before spending GPU hours on it.
//
//   echo '{"response": "... \\boxed{\\frac12}", "label": "0.5"}' | ooze reward --rm-type math
//   {"reward":1.0}
//
// Input lines: {"response": TEXT, "label": TEXT or any JSON, "metadata": {...}, "prompt": TEXT}
// (response required). Flags: those of RewardOptions (--rm-type, --custom-rm-path,
// --reward-key, --rm-url, ...):
//
//   ooze reward --custom-rm-path my_rewards.reward_func < lines.jsonl     # or my_rewards.py:fn
//
// A line a built-in rule cannot score for want of a label (every --rm-type but random compares
// with one; rollout/rewards/reward_label.h) answers an error naming the keys the line has.
// Lines are scored in chunks of 256: an async Python function's calls of a chunk overlap, and a
// batched function (--group-rm) gets a chunk per call. A line that cannot be scored answers
// {"error": "line N: ..."} and the exit status is then 1; the other lines are still scored.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "core/config.h"

namespace ooze::launcher {

// Its flags.
const ConfigSchema& reward_schema();

// `args` are the arguments after "reward". Returns the exit code; throws ConfigError for bad
// flags and PluginError for a plugin that does not load.
int run_reward_command(const std::vector<std::string>& args, std::istream& in, std::ostream& out);

}  // namespace ooze::launcher
