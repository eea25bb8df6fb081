// cereal save/load for Sample, so rollouts can be arguments of actor calls (the RL loop hands
// them to the train actors) or be written with any cereal binary archive. Found by
// argument-dependent lookup: including this header is all a caller needs.
//
// The JSON fields (metadata, tools, reward, metrics) travel as their JSON text; the status as
// int32, range-checked on the way in, since the bytes may come from the network.
#pragma once

#include <cereal/cereal.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "rollout/sample.h"

namespace ooze::rollout {

template <class Archive>
void save(Archive& ar, const Sample& sample) {
  ar(sample.group_index, sample.index, sample.prompt, sample.tokens, sample.response,
     sample.response_length, sample.label, sample.metadata.dump(), sample.tools.dump(),
     sample.reward.dump(), sample.loss_mask, sample.rollout_log_probs, sample.weight_versions,
     static_cast<int32_t>(sample.status), sample.abort_reason, sample.metrics.dump(),
     sample.rollout_id.dump(), sample.teacher_log_probs);
}

template <class Archive>
void load(Archive& ar, Sample& sample) {
  std::string metadata, tools, reward, metrics, rollout_id;
  int32_t status = 0;
  ar(sample.group_index, sample.index, sample.prompt, sample.tokens, sample.response,
     sample.response_length, sample.label, metadata, tools, reward, sample.loss_mask,
     sample.rollout_log_probs, sample.weight_versions, status, sample.abort_reason, metrics,
     rollout_id, sample.teacher_log_probs);
  if (status < static_cast<int32_t>(Sample::Status::kPending) ||
      status > static_cast<int32_t>(Sample::Status::kAborted)) {
    throw FormatError("a serialized Sample has status code " + std::to_string(status) +
                      ", which names no status; sender and receiver disagree on the format");
  }
  sample.status = static_cast<Sample::Status>(status);
  try {
    sample.metadata = nlohmann::json::parse(metadata);
    sample.tools = nlohmann::json::parse(tools);
    sample.reward = nlohmann::json::parse(reward);
    sample.metrics = nlohmann::json::parse(metrics);
    sample.rollout_id = nlohmann::json::parse(rollout_id);
  } catch (const nlohmann::json::parse_error& error) {
    throw FormatError(std::string("a serialized Sample carries malformed JSON: ") + error.what());
  }
}

}  // namespace ooze::rollout
