#include "rollout/rewards/builtin_rewards.h"

#include <cstdint>
#include <optional>

#include "core/error.h"
#include "rollout/rewards/boxed_answer.h"
#include "rollout/rewards/dapo_reward.h"
#include "rollout/rewards/deepscaler_reward.h"
#include "rollout/rewards/f1_reward.h"
#include "rollout/rewards/gpqa_reward.h"
#include "rollout/rewards/math_reward.h"
#include "rollout/rewards/reward_label.h"
#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {
namespace {

const std::string kBoxedPrefix = "boxed_";

bool is_base_type(const std::string& type) {
  for (const std::string& known : builtin_reward_types()) {
    if (type == known) return true;
  }
  return false;
}

// FNV-1a over the index and the response, then a SplitMix64 finaliser: the same sample always
// draws the same bit, different samples draw independent-looking ones.
double random_reward(int64_t sample_index, const std::string& response) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const auto mix_byte = [&hash](uint8_t byte) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  };
  const auto index = static_cast<uint64_t>(sample_index);
  for (int shift = 0; shift < 64; shift += 8) mix_byte(static_cast<uint8_t>(index >> shift));
  for (char c : response) mix_byte(static_cast<uint8_t>(c));
  hash ^= hash >> 30;
  hash *= 0xbf58476d1ce4e5b9ull;
  hash ^= hash >> 27;
  hash *= 0x94d049bb133111ebull;
  hash ^= hash >> 31;
  return static_cast<double>(hash >> 63);
}

// A rule's reward as a number: itself, or dapo's "score".
double scalar_of(const nlohmann::json& reward) {
  return reward.is_number() ? reward.get<double>() : reward.at("score").get<double>();
}

std::string type_list() {
  std::string list;
  for (const std::string& type : builtin_reward_types()) {
    if (!list.empty()) list += ", ";
    list += type;
  }
  return list;
}

}  // namespace

std::vector<std::string> builtin_reward_types() {
  return {"deepscaler", "dapo", "math", "f1", "gpqa", "random"};
}

bool is_builtin_reward_type(const std::string& rm_type) {
  if (starts_with(rm_type, kBoxedPrefix)) return is_base_type(rm_type.substr(kBoxedPrefix.size()));
  return is_base_type(rm_type);
}

std::string effective_reward_type(const std::string& rm_type_flag, const Sample& sample) {
  return effective_reward_type(rm_type_flag, sample.metadata);
}

std::string effective_reward_type(const std::string& rm_type_flag, const nlohmann::json& metadata) {
  if (metadata.is_object()) {
    const auto found = metadata.find("rm_type");
    if (found != metadata.end() && found->is_string()) {
      const std::string from_sample = trim_ascii(found->get<std::string>());
      if (!from_sample.empty()) return from_sample;
    }
  }
  return trim_ascii(rm_type_flag);
}

nlohmann::json score_builtin_reward(const std::string& rm_type, const Sample& sample) {
  if (!is_builtin_reward_type(rm_type)) {
    throw ConfigError("reward type '" + rm_type + "' (--rm-type, or the sample's metadata " +
                      "rm_type) is not a built-in rule; the built-in types are " + type_list() +
                      ", each also as boxed_<type> to grade only the last \\boxed{} of the " +
                      "response. Use --custom-rm-path lib.so:function for a rule of your own.");
  }
  std::string type = rm_type;
  std::string response = sample.response;
  if (starts_with(type, kBoxedPrefix)) {
    type = type.substr(kBoxedPrefix.size());
    response = last_boxed_content(response).value_or("");
  }
  if (type == "random") return random_reward(sample.index, response);
  const auto score = [&](const std::string& label) -> nlohmann::json {
    if (type == "deepscaler") return deepscaler_reward(response, label);
    if (type == "dapo") return dapo_reward(response, label);
    if (type == "math") return math_reward(response, label);
    if (type == "f1") return f1_reward(response, label);
    return gpqa_reward(response, label, sample.metadata);
  };
  // A list of answers: the best score over them (reward_label.h).
  const std::vector<std::string> answers = label_answers(sample.label);
  if (answers.size() <= 1) return score(answers.empty() ? sample.label : answers.front());
  nlohmann::json best;
  for (const std::string& answer : answers) {
    nlohmann::json scored = score(answer);
    if (best.is_null() || scalar_of(scored) > scalar_of(best)) best = std::move(scored);
  }
  return best;
}

}  // namespace ooze::rollout
