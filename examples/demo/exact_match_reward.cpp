// The demo's reward: 1 when the response, without surrounding whitespace, is exactly the label
// (the sum), else 0. Built with ooze (examples/demo/CMakeLists.txt) and loaded by
//   --custom-rm-path build/examples/demo/libexact_match_reward.so:exact_match
#include <rollout/reward_plugin.h>

#include <string>

namespace {

std::string trimmed(const std::string& text) {
  const char* space = " \t\r\n";
  const size_t first = text.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(space) - first + 1);
}

}  // namespace

nlohmann::json exact_match(const ooze::rollout::Sample& sample) {
  return trimmed(sample.response) == trimmed(sample.label) ? 1.0 : 0.0;
}
OOZE_EXPORT_REWARD(exact_match)
