#include "rollout/reward_label_check.h"

#include <string>

#include "core/error.h"
#include "rollout/rewards/builtin_rewards.h"
#include "rollout/rewards/reward_label.h"

namespace ooze::rollout {
namespace {

std::string key_list(const std::vector<std::string>& keys) {
  if (keys.empty()) return "none";
  std::string list;
  for (const std::string& key : keys) list += (list.empty() ? "" : ", ") + key;
  return list;
}

bool contains_gpqa(const std::string& type) { return type.find("gpqa") != std::string::npos; }

// "data.jsonl@[0:100]" -> "data.jsonl": line numbers are the file's.
std::string file_of(const std::string& path) {
  const size_t slice = path.rfind("@[");
  return slice != std::string::npos && path.back() == ']' ? path.substr(0, slice) : path;
}

}  // namespace

std::string checked_reward_rule(const RewardModel& rewards) {
  const RewardOptions& options = rewards.options();
  if (!options.custom_rm_path.empty() || options.environment_rewards) return "";
  return is_builtin_reward_type(options.rm_type) ? options.rm_type : "";  // not remote_rm
}

void check_reward_labels(const RewardModel& rewards, const PromptDataset& dataset) {
  const std::string rule = checked_reward_rule(rewards);
  if (rule.empty()) return;
  const PromptDatasetOptions& options = dataset.options();
  const Prompt* first = nullptr;
  std::string first_type;
  int64_t missing = 0;
  for (const Prompt& prompt : dataset.prompts()) {
    const std::string type = effective_reward_type(rule, prompt.metadata);
    if (has_reference_answer(type, prompt.label, prompt.metadata)) continue;
    if (++missing == 1) {
      first = &prompt;
      first_type = type;
    }
  }
  if (missing == 0) return;

  const std::string type_flag =
      first_type == rule ? "--rm-type " + first_type : "rm_type " + first_type + " (metadata)";
  const std::string file = file_of(options.path);
  const std::string where = file + ":" + std::to_string(first->line);
  const std::string gpqa_too =
      contains_gpqa(first_type) ? " (or metadata correct_letter / correct_answer)" : "";
  const std::string how_many = missing == dataset.size()
                                   ? "every prompt of " + file
                                   : std::to_string(missing) + " of " +
                                         std::to_string(dataset.size()) + " prompts of " + file;
  if (options.label_key.empty()) {
    throw ConfigError(
        type_flag + " compares each response to a label, but no " + options.flags.label_key +
        " is given: " + how_many + " would score 0 whatever it answers (the first at " + where +
        "). Name the key that holds the answer with " + options.flags.label_key + gpqa_too +
        "; the first line has keys: " + key_list(dataset.first_record_keys()));
  }
  const bool singular = missing == dataset.size() || missing == 1;
  throw FormatError(type_flag + " compares each response to a label, but " + how_many + " (the " +
                    "first at " + where + ") " + (singular ? "has" : "have") +
                    " an empty or null '" + options.label_key + "' (" + options.flags.label_key +
                    ")" + gpqa_too +
                    ", and such a prompt scores 0 whatever the model answers; fill in or remove "
                    "those lines");
}

}  // namespace ooze::rollout
