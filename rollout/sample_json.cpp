#include "rollout/sample_json.h"

#include <string>

#include "core/error.h"
#include "rollout/sample_fields.h"

namespace ooze::rollout {

nlohmann::json sample_to_json(const Sample& sample) {
  nlohmann::json json = nlohmann::json::object();
  visit_sample_fields(sample, [&](const char* name, const auto& value) { json[name] = value; });
  return json;
}

namespace {

Sample::Status status_from_word(const std::string& word) {
  for (Sample::Status status : {Sample::Status::kPending, Sample::Status::kCompleted,
                                Sample::Status::kTruncated, Sample::Status::kAborted}) {
    if (word == to_string(status)) return status;
  }
  throw FormatError("sample status '" + word +
                    "' is not one of pending, completed, truncated, aborted");
}

template <typename T>
void read(const nlohmann::json& json, const char* key, T& out) {
  auto it = json.find(key);
  if (it == json.end()) throw FormatError(std::string("sample: missing field '") + key + "'");
  try {
    it->get_to(out);
  } catch (const nlohmann::json::exception& error) {
    throw FormatError(std::string("sample: field '") + key + "': " + error.what());
  }
}

}  // namespace

Sample sample_from_json(const nlohmann::json& json) {
  if (!json.is_object()) throw FormatError("sample: expected a JSON object, got " + json.dump());
  Sample sample;
  read(json, "group_index", sample.group_index);
  read(json, "index", sample.index);
  read(json, "prompt", sample.prompt);
  read(json, "tokens", sample.tokens);
  read(json, "response", sample.response);
  read(json, "response_length", sample.response_length);
  read(json, "label", sample.label);
  read(json, "metadata", sample.metadata);
  read(json, "tools", sample.tools);
  read(json, "reward", sample.reward);
  read(json, "loss_mask", sample.loss_mask);
  read(json, "rollout_log_probs", sample.rollout_log_probs);
  read(json, "weight_versions", sample.weight_versions);
  std::string status;
  read(json, "status", status);
  sample.status = status_from_word(status);
  read(json, "abort_reason", sample.abort_reason);
  read(json, "metrics", sample.metrics);
  // Absent in samples saved before ooze kept it.
  if (auto it = json.find("rollout_id"); it != json.end()) {
    if (!it->is_null() && !it->is_number_integer()) {
      throw FormatError("sample: field 'rollout_id' must be an integer or null, got " + it->dump());
    }
    sample.rollout_id = *it;
  }
  // Absent without a distillation teacher, and in samples saved before ooze kept it.
  if (json.contains("teacher_log_probs")) read(json, "teacher_log_probs", sample.teacher_log_probs);
  const auto response = static_cast<size_t>(sample.response_length);
  if (sample.response_length < 0 || response > sample.tokens.size() ||
      sample.loss_mask.size() != response || sample.rollout_log_probs.size() != response ||
      sample.weight_versions.size() != response) {
    throw FormatError("sample " + std::to_string(sample.index) +
                      ": loss_mask, rollout_log_probs and weight_versions must each have "
                      "response_length (" +
                      std::to_string(sample.response_length) + ") entries, within the tokens");
  }
  if (!sample.teacher_log_probs.empty() && sample.teacher_log_probs.size() != response) {
    throw FormatError("sample " + std::to_string(sample.index) + ": teacher_log_probs has " +
                      std::to_string(sample.teacher_log_probs.size()) +
                      " entries; it must be empty or have response_length (" +
                      std::to_string(sample.response_length) + ")");
  }
  return sample;
}

nlohmann::json groups_to_json(const std::vector<std::vector<Sample>>& groups) {
  nlohmann::json out = nlohmann::json::array();
  for (const std::vector<Sample>& group : groups) {
    nlohmann::json samples = nlohmann::json::array();
    for (const Sample& sample : group) samples.push_back(sample_to_json(sample));
    out.push_back(std::move(samples));
  }
  return out;
}

std::vector<std::vector<Sample>> groups_from_json(const nlohmann::json& json) {
  if (!json.is_array()) throw FormatError("sample groups: expected a list of lists of samples");
  std::vector<std::vector<Sample>> groups;
  for (const nlohmann::json& group : json) {
    if (!group.is_array()) throw FormatError("sample groups: a group is not a list of samples");
    std::vector<Sample> samples;
    for (const nlohmann::json& sample : group) samples.push_back(sample_from_json(sample));
    groups.push_back(std::move(samples));
  }
  return groups;
}

}  // namespace ooze::rollout
