#include "rollout/rewards/boxed_answer.h"

#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {

std::optional<std::string> last_boxed_content(const std::string& text) {
  std::string command = "\\boxed";
  size_t start = text.rfind(command);
  if (start == std::string::npos) {
    command = "\\fbox";
    start = text.rfind(command);
    if (start == std::string::npos) return std::nullopt;
  }
  size_t pos = start + command.size();
  const size_t after_command = pos;
  while (pos < text.size() && is_ascii_space(text[pos]) && text[pos] != '\n') ++pos;
  if (pos < text.size() && text[pos] == '{') {
    int open = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      if (text[i] == '{') {
        ++open;
      } else if (text[i] == '}' && --open == 0) {
        return text.substr(pos + 1, i - pos - 1);
      }
    }
    return std::nullopt;  // never closed: a truncated response
  }
  if (pos == after_command || pos >= text.size()) return std::nullopt;  // "\boxedx", "\boxed"
  size_t end = pos;
  while (end < text.size() && text[end] != '$' && text[end] != '\n') ++end;
  return trim_ascii(text.substr(pos, end - pos));
}

}  // namespace ooze::rollout
