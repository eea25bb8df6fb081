// Slime's built-in reward rules by their --rm-type names, for the rollout manager and for
// plugins that want a rule as a building block:
//
//   deepscaler  1 / 0: the \boxed{} answer after </think>, graded as math    (deepscaler_reward.h)
//   dapo        {"score": 1 / -1, "acc": 1 / 0, "pred": ...}: "Answer: ..."  (dapo_reward.h)
//   math        1 / 0: the last \boxed{} answer, string then symbolic check  (math_reward.h)
//   f1          token F1 in [0, 1]                                            (f1_reward.h)
//   gpqa        1 / 0: the multiple-choice letter                             (gpqa_reward.h)
//   random      0 / 1, a hash of the sample's index and response: reproducible, for smoke tests
//
// "boxed_<type>" first reduces the response to the content of its last \boxed{} (empty when it
// has none), then applies <type>. remote_rm and --custom-rm-path are not rules: the rollout
// manager handles them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rollout/sample.h"

namespace ooze::rollout {

// The base types above, in that order.
std::vector<std::string> builtin_reward_types();

// Whether `rm_type` is one of them, with or without the boxed_ prefix.
bool is_builtin_reward_type(const std::string& rm_type);

// The type a sample is scored with, as Slime picks it: the sample's metadata "rm_type" when it
// is a non-empty string, else `rm_type_flag` (--rm-type); trimmed.
std::string effective_reward_type(const std::string& rm_type_flag, const Sample& sample);
// The same from a prompt's metadata.
std::string effective_reward_type(const std::string& rm_type_flag, const nlohmann::json& metadata);

// The sample's reward by rule `rm_type`, from its response, label and metadata: a number, or
// for dapo an object (use --reward-key score). A label listing several answers scores the best
// of them (reward_label.h). Throws ooze::ConfigError naming the valid types
// when `rm_type` is not one. Never throws for any response or label; safe to call concurrently.
nlohmann::json score_builtin_reward(const std::string& rm_type, const Sample& sample);

}  // namespace ooze::rollout
