// Refuses prompt data that a built-in reward rule cannot score. A rule that compares the
// response to a label (rollout/rewards/reward_label.h: every --rm-type but random) gives 0 to a
// sample without one, whatever it answers: a run on such data trains on silent zeros. So before
// any engine starts, every prompt must carry a reference answer for the type it is scored with
// (--rm-type, or its metadata's rm_type):
//
//   check_reward_labels(rewards, dataset);   // ConfigError: no --label-key at all
//                                             // FormatError: FILE:LINE of the first prompt
//                                             // without a label, and how many lack one
//
// Your own rewards (--custom-rm-path, Python or C++), remote_rm and an environment's rewards
// (--env-url) are not checked: ooze cannot tell what they read.
#pragma once

#include "rollout/prompt_dataset.h"
#include "rollout/reward_model.h"

namespace ooze::rollout {

void check_reward_labels(const RewardModel& rewards, const PromptDataset& dataset);

// The built-in rule `rewards` scores with (--rm-type), or "" when it is none of them (a function
// of the user's, remote_rm, an environment): the rule check_reward_labels and `ooze reward`
// check labels for.
std::string checked_reward_rule(const RewardModel& rewards);

}  // namespace ooze::rollout
