#include "rollout/agent_trajectory.h"

#include <algorithm>

#include "models/tokenizer.h"
#include "rollout/sample_generation.h"

namespace ooze::rollout {

namespace {

bool extends(const std::vector<int64_t>& ids, const std::vector<int64_t>& prefix) {
  return ids.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

// A sample that starts at `call`'s prompt: what `sample` keeps, none of its tokens.
Sample start_segment(const Sample& sample, const serving::SessionCall& call,
                     const models::Tokenizer& tokenizer) {
  Sample segment = sample;
  segment.tokens = call.prompt_ids;
  segment.prompt = call.prompt_text.empty() ? tokenizer.decode(call.prompt_ids) : call.prompt_text;
  segment.response.clear();
  segment.response_length = 0;
  segment.loss_mask.clear();
  segment.rollout_log_probs.clear();
  segment.weight_versions.clear();
  segment.status = Sample::Status::kPending;
  segment.abort_reason.clear();
  segment.metrics = nlohmann::json::object();
  return segment;
}

}  // namespace

std::vector<Sample> trajectory_samples(const Sample& sample, const serving::SessionRecord& record,
                                       const models::Tokenizer& tokenizer) {
  std::vector<Sample> samples;
  int64_t tool_calls = 0;
  for (const serving::SessionCall& call : record.calls) {
    tool_calls += call.tool_calls;
    if (samples.empty() || !extends(call.prompt_ids, samples.back().tokens)) {
      samples.push_back(start_segment(sample, call, tokenizer));
    } else {
      Sample& current = samples.back();
      const std::vector<int64_t> observation(call.prompt_ids.begin() + current.tokens.size(),
                                             call.prompt_ids.end());
      append_non_policy_tokens(current, observation, tokenizer.decode(observation));
    }
    append_engine_output(samples.back(), call.output);
  }
  if (samples.empty()) return samples;
  samples.front().metrics["agent/turns"] = static_cast<int64_t>(record.calls.size());
  samples.front().metrics["agent/tool_calls"] = tool_calls;
  samples.front().metrics["agent/segments"] = static_cast<int64_t>(samples.size());
  if (samples.size() > 1) {
    for (size_t i = 0; i + 1 < samples.size(); ++i) samples[i].reward = 0;
    for (Sample& segment : samples) segment.rollout_id = sample.index;
  }
  return samples;
}

}  // namespace ooze::rollout
