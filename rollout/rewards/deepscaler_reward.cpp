#include "rollout/rewards/deepscaler_reward.h"

#include <optional>

#include "rollout/rewards/boxed_answer.h"
#include "rollout/rewards/math_reward.h"
#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {

double deepscaler_reward(const std::string& response, const std::string& label) {
  std::string solution;
  const std::string think_end = "</think>";
  const std::string response_marker = "###Response";
  if (const size_t found = response.rfind(think_end); found != std::string::npos) {
    solution = response.substr(found + think_end.size());
  } else if (const size_t first = response.find(response_marker); first != std::string::npos) {
    const size_t begin = first + response_marker.size();
    const size_t second = response.find(response_marker, begin);
    solution = response.substr(begin, second == std::string::npos ? second : second - begin);
  } else {
    return 0.0;
  }
  if (!contains(solution, "\\boxed")) return 0.0;
  const std::optional<std::string> given = last_boxed_content(solution);
  if (!given || label.empty()) return 0.0;
  std::string truth = label;
  if (contains(label, "\\boxed") || contains(label, "\\fbox")) {
    const std::optional<std::string> boxed = last_boxed_content(label);
    if (!boxed) return 0.0;
    truth = *boxed;
  }
  return grade_math_answer(*given, truth) ? 1.0 : 0.0;
}

}  // namespace ooze::rollout
