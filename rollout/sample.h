// One generated sample, as the rollout manager, reward functions, filters, plugins and the
// trainer see it: the fields of Slime's Sample, under the same names.
//
// Token layout (Slime's): `tokens` is the prompt followed by the response, and every per-token
// vector (loss_mask, rollout_log_probs, weight_versions, teacher_log_probs) covers the response
// part only, so
//   tokens.size() == prompt_length() + response_length
//   loss_mask.size() == rollout_log_probs.size() == weight_versions.size() == response_length
//   teacher_log_probs.size() == response_length, or 0 when no teacher scored the sample
// Response tokens the policy did not sample (tool output appended by a multi-turn generate
// function) have loss mask 0, log-prob 0 and weight version -1.
//
// Header-only and free of LibTorch: plugins include it (through rollout/reward_plugin.h) and
// link nothing of ooze.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace ooze::rollout {

struct Sample {
  enum class Status {
    kPending,    // not generated yet, or a partial sample waiting to continue
    kCompleted,  // the engine stopped on EOS or a stop string / token
    kTruncated,  // the response reached its length limit
    kAborted,    // generation was aborted (dynamic sampling had enough, a pause, an engine error)
  };

  int64_t group_index = 0;  // the prompt's index in the run: the group's samples share it
  int64_t index = 0;        // the sample's index in the run

  std::string prompt;           // the prompt text the engine saw (chat template applied)
  std::vector<int64_t> tokens;  // prompt tokens, then response tokens
  std::string response;         // the response text
  int64_t response_length = 0;  // response tokens at the end of `tokens`

  std::string label;  // the dataset's --label-key value (JSON text if not a string)
  nlohmann::json metadata = nlohmann::json::object();  // the dataset's --metadata-key value
  nlohmann::json tools = nullptr;                      // the dataset's --tool-key value, when given

  // A number, or an object whose --reward-key field is the scalar (null until scored).
  nlohmann::json reward = nullptr;

  std::vector<int32_t> loss_mask;        // 1: the policy sampled the token; 0: it did not
  std::vector<float> rollout_log_probs;  // the engine's log-prob of each response token
  std::vector<int64_t> weight_versions;  // the weight version that sampled each response token
  // On-policy distillation with --opd-type engine: the teacher's log-prob of each response token,
  // fetched as the sample finished generating; empty otherwise.
  std::vector<float> teacher_log_probs;

  Status status = Status::kPending;
  std::string abort_reason;  // why, when status is kAborted

  // Free-form numbers (tool calls made, turns, ...); averaged into the rollout's metrics.
  nlohmann::json metrics = nlohmann::json::object();

  // Slime's rollout_id: the samples one generate call split a conversation into share it (a
  // number); they train as one rollout of their group. null for a sample of its own.
  nlohmann::json rollout_id = nullptr;

  int64_t prompt_length() const { return static_cast<int64_t>(tokens.size()) - response_length; }

  // The scalar reward: `reward` itself when it is a number, else its `reward_key` field.
  // Throws std::invalid_argument naming the sample when there is none.
  double reward_value(const std::string& reward_key = "") const {
    if (reward.is_number()) return reward.get<double>();
    const std::string where =
        "sample " + std::to_string(index) + " (group " + std::to_string(group_index) + ")";
    if (reward.is_null()) throw std::invalid_argument(where + " has no reward yet");
    if (!reward.is_object()) {
      throw std::invalid_argument(where + ": reward must be a number or an object, got " +
                                  reward.dump());
    }
    if (reward_key.empty()) {
      throw std::invalid_argument(where + ": the reward is an object (" + reward.dump() +
                                  "); name its scalar field with --reward-key");
    }
    auto field = reward.find(reward_key);
    if (field == reward.end() || !field->is_number()) {
      throw std::invalid_argument(where + ": the reward " + reward.dump() +
                                  " has no numeric field '" + reward_key + "' (--reward-key)");
    }
    return field->get<double>();
  }

  // The distinct weight versions that sampled this response, oldest first.
  std::vector<int64_t> distinct_weight_versions() const {
    std::vector<int64_t> versions;
    for (int64_t version : weight_versions) {
      if (version >= 0 && (versions.empty() || versions.back() != version)) {
        versions.push_back(version);
      }
    }
    return versions;
  }
};

inline const char* to_string(Sample::Status status) {
  switch (status) {
    case Sample::Status::kPending:
      return "pending";
    case Sample::Status::kCompleted:
      return "completed";
    case Sample::Status::kTruncated:
      return "truncated";
    case Sample::Status::kAborted:
      return "aborted";
  }
  return "pending";
}

}  // namespace ooze::rollout
