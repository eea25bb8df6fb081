#include "rollout/rewards/reward_label.h"

#include <algorithm>

#include "rollout/rewards/builtin_rewards.h"
#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {
namespace {

std::string base_type(const std::string& rm_type) {
  const std::string prefix = "boxed_";
  return starts_with(rm_type, prefix) ? rm_type.substr(prefix.size()) : rm_type;
}

bool is_blank(const std::string& text) { return trim_ascii(text).empty(); }

// gpqa's answers that live in the metadata (gpqa_reward.h).
bool metadata_names_answer(const nlohmann::json& metadata) {
  if (!metadata.is_object()) return false;
  for (const char* key : {"correct_letter", "correct_answer", "answer_text"}) {
    const auto found = metadata.find(key);
    if (found == metadata.end() || found->is_null()) continue;
    if (found->is_string() && is_blank(found->get<std::string>())) continue;
    return true;
  }
  return false;
}

}  // namespace

bool reward_type_needs_label(const std::string& rm_type) {
  return is_builtin_reward_type(rm_type) && base_type(rm_type) != "random";
}

std::vector<std::string> label_answers(const std::string& label) {
  if (is_blank(label)) return {};
  const size_t first = label.find_first_not_of(" \t\r\n");
  if (label[first] == '[') {
    const nlohmann::json parsed = nlohmann::json::parse(label, nullptr, false);
    const bool strings = parsed.is_array() &&
                         std::all_of(parsed.begin(), parsed.end(),
                                     [](const nlohmann::json& item) { return item.is_string(); });
    if (strings) {
      std::vector<std::string> answers;
      for (const nlohmann::json& item : parsed) {
        if (!is_blank(item.get<std::string>())) answers.push_back(item.get<std::string>());
      }
      return answers;
    }
  }
  return {label};
}

bool has_reference_answer(const std::string& rm_type, const std::string& label,
                          const nlohmann::json& metadata) {
  if (!reward_type_needs_label(rm_type)) return true;
  if (!label_answers(label).empty()) return true;
  return base_type(rm_type) == "gpqa" && metadata_names_answer(metadata);
}

}  // namespace ooze::rollout
