// Plugins the rollout manager tests load: built as a shared library the way a user builds one.
#include <stdexcept>
#include <string>
#include <vector>

#include "rollout/reward_plugin.h"

using ooze::rollout::Sample;
using ooze::rollout::plugin::GenerationContext;

// 1 when the first response token is odd: varies between samples at temperature 1.
nlohmann::json first_token_parity(const Sample& sample) {
  if (sample.response_length == 0) return 0.0;
  return static_cast<double>(sample.tokens[static_cast<size_t>(sample.prompt_length())] % 2);
}
OOZE_EXPORT_REWARD(first_token_parity)

// Two turns with an observation between them: "<obs>" is not the policy's.
void two_turns(GenerationContext& context, Sample& sample) {
  context.generate(sample, 5);
  if (sample.status == Sample::Status::kAborted) return;
  context.append_observation(sample, "<obs>");
  context.generate(sample);
  sample.metrics["turns"] = 2;
}
OOZE_EXPORT_GENERATE(two_turns)

// Fails on one sample, to show what a broken reward does to a rollout.
nlohmann::json throws_on_sample_three(const Sample& sample) {
  if (sample.index == 3) throw std::runtime_error("no label I can read");
  return 1.0;
}
OOZE_EXPORT_REWARD(throws_on_sample_three)
