// Scored samples made by hand for the tests of what a rollout becomes on its way to the trainer.
#pragma once

#include <cstdint>

#include "rollout/sample.h"

namespace ooze::testing {

// Sample `index` of group `group`: 3 prompt tokens, `response` response tokens whose last one is
// tool output (loss mask 0) when `with_tool_token`.
inline rollout::Sample make_sample(int64_t group, int64_t index, int64_t response, double reward,
                                   bool with_tool_token = false) {
  rollout::Sample sample;
  sample.group_index = group;
  sample.index = index;
  sample.tokens = {1, 2, 3};
  for (int64_t t = 0; t < response; ++t) {
    sample.tokens.push_back(10 + index + t);
    const bool tool = with_tool_token && t == response - 1;
    sample.loss_mask.push_back(tool ? 0 : 1);
    sample.rollout_log_probs.push_back(tool ? 0.0f : -0.1f * static_cast<float>(t + 1));
    sample.weight_versions.push_back(tool ? -1 : 3);
  }
  sample.response_length = response;
  sample.reward = reward;
  sample.status = rollout::Sample::Status::kCompleted;
  return sample;
}

}  // namespace ooze::testing
