// A reward plugin: ooze's built-in `math` rule (the last \boxed{} answer against the label),
// plus a small bonus for a well-formed response, reasoning closed by </think> and then exactly
// one boxed answer. The reward is an object; train with --reward-key score.
#include <rollout/reward_plugin.h>
#include <rollout/rewards/builtin_rewards.h>

#include <string>

namespace {

constexpr double kFormatBonus = 0.1;

// Reasoning closed by </think>, then the response's one and only \boxed{} answer.
bool is_well_formed(const std::string& response) {
  const size_t reasoning_end = response.find("</think>");
  const size_t box = response.find("\\boxed{");
  if (reasoning_end == std::string::npos || box == std::string::npos || box < reasoning_end) {
    return false;
  }
  return response.find("\\boxed{", box + 1) == std::string::npos;
}

}  // namespace

nlohmann::json math_with_format_bonus(const ooze::rollout::Sample& sample) {
  const double correct = ooze::rollout::score_builtin_reward("math", sample).get<double>();
  const double bonus = is_well_formed(sample.response) ? kFormatBonus : 0.0;
  return {{"score", correct + bonus}, {"correct", correct}, {"format_bonus", bonus}};
}
OOZE_EXPORT_REWARD(math_with_format_bonus)
