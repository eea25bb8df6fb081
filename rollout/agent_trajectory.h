// The training samples of an agent's session (serving/session_server.h): the engine's tokens,
// never re-tokenized text.
//
//   std::vector<Sample> samples = trajectory_samples(sample, sessions.close(id), tokenizer);
//
// Calls are taken in order. A call whose prompt ids extend the current sample's tokens (its
// prompt, what earlier calls sampled and the observations between them) continues it: the new
// prompt tokens are appended as an observation (loss mask 0, log-prob 0, weight version -1)
// and the completion as policy tokens (loss mask 1, the engine's log-probs and weight
// versions). A call whose prompt does not (the template dropped earlier reasoning, the agent
// rewrote or compacted its history) starts a new sample: Slime's rule for a generate function
// that returns several samples. Samples of one session share rollout_id (the first sample's
// index) when there are several; the rollout's reward is the sum of its samples', so every
// sample but the last carries reward 0 and the last is the one scored.
//
// sample.metrics of the first sample: agent/turns (model calls), agent/tool_calls,
// agent/segments (samples the session became).
#pragma once

#include <vector>

#include "rollout/sample.h"
#include "serving/session_server.h"

namespace ooze::models {
class Tokenizer;
}

namespace ooze::rollout {

// `sample` gives what every resulting sample keeps (indices, label, metadata, tools); its own
// tokens are replaced by the session's. A session without calls gives no samples. Throws
// FormatError when a recorded engine output is malformed.
std::vector<Sample> trajectory_samples(const Sample& sample, const serving::SessionRecord& record,
                                       const models::Tokenizer& tokenizer);

}  // namespace ooze::rollout
