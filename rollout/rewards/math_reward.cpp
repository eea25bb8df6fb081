#include "rollout/rewards/math_reward.h"

#include <optional>

#include "rollout/rewards/boxed_answer.h"
#include "rollout/rewards/math_equivalence.h"
#include "rollout/rewards/math_normalization.h"
#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {

bool grade_math_answer(const std::string& given_answer, const std::string& ground_truth) {
  if (given_answer.size() > kMaxGradedAnswerBytes || ground_truth.size() > kMaxGradedAnswerBytes) {
    return trim_ascii(given_answer) == trim_ascii(ground_truth);
  }
  if (strip_math_answer(given_answer) == strip_math_answer(ground_truth)) return true;
  return normalized_answers_equivalent(normalize_math_answer(given_answer),
                                       normalize_math_answer(ground_truth));
}

double math_reward(const std::string& response, const std::string& label) {
  if (label.empty()) return 0.0;
  std::string truth = label;
  if (contains(label, "\\boxed")) {
    std::optional<std::string> boxed = last_boxed_content(label);
    if (!boxed) return 0.0;
    truth = *boxed;
  }
  const std::optional<std::string> given = last_boxed_content(response);
  if (!given) return 0.0;
  return grade_math_answer(*given, truth) ? 1.0 : 0.0;
}

}  // namespace ooze::rollout
