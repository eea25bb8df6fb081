// Every field of a Sample under its name, in one list: what sample_to_json writes and what a
// Python hook's sample is built from (python_sample.h), so the two never disagree.
//
//   visit_sample_fields(sample, [&](const char* name, const auto& value) { ... });
//
// Values are int64_t, std::string, std::vector<int64_t>, std::vector<int32_t>,
// std::vector<float> or nlohmann::json; the status is its word ("completed", ...).
#pragma once

#include <string>

#include "rollout/sample.h"

namespace ooze::rollout {

template <typename Visit>
void visit_sample_fields(const Sample& sample, Visit&& visit) {
  visit("group_index", sample.group_index);
  visit("index", sample.index);
  visit("prompt", sample.prompt);
  visit("tokens", sample.tokens);
  visit("response", sample.response);
  visit("response_length", sample.response_length);
  visit("label", sample.label);
  visit("metadata", sample.metadata);
  visit("tools", sample.tools);
  visit("reward", sample.reward);
  visit("loss_mask", sample.loss_mask);
  visit("rollout_log_probs", sample.rollout_log_probs);
  visit("weight_versions", sample.weight_versions);
  visit("status", std::string(to_string(sample.status)));
  visit("abort_reason", sample.abort_reason);
  visit("metrics", sample.metrics);
  visit("rollout_id", sample.rollout_id);
  visit("teacher_log_probs", sample.teacher_log_probs);
}

}  // namespace ooze::rollout
