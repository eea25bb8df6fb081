// The engine's view of one request and of each sequence it generates.
//
// A request of n samples starts as one sequence with fan_out = n: its prompt is prefilled once,
// and when the prompt's last token is computed the sequence forks into n sequences that share
// the prompt's blocks (engine/block_manager.h) and sample their first tokens from the same
// logits. A preempted sequence goes back to waiting with its blocks freed and computes
// prompt + output so far again when readmitted (the prefix cache often supplies most of it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/block_manager.h"
#include "engine/engine.h"
#include "engine/output_text.h"
#include "engine/request.h"

namespace ooze::engine {

struct RequestState {
  GenerateRequest request;
  OutputCallback on_update;
  uint64_t seed = 0;       // the request's seed (given, or drawn at submission)
  int64_t unfinished = 0;  // samples without a finished output yet
};

struct Sequence {
  std::shared_ptr<RequestState> request;
  int64_t index = 0;     // sample index within the request
  int64_t fan_out = 1;   // > 1 until the prompt is computed and the sequence forks
  uint64_t arrival = 0;  // admission order: the newest running sequence is preempted first
  // Prompt followed by the output so far. The KV cache holds tokens[0 .. table.num_tokens);
  // the rest are fed in the next steps (one, the last sampled token, while decoding).
  std::vector<int64_t> tokens;
  int64_t prompt_length = 0;
  int64_t cached_tokens = 0;    // prompt tokens supplied by the prefix cache at first admission
  bool counted_prompt = false;  // prompt statistics recorded (only once, not on readmission)
  BlockTable table;
  std::optional<OutputText> text;
  GenerateOutput output;

  int64_t remaining() const { return static_cast<int64_t>(tokens.size()) - table.num_tokens; }
  const SamplingParams& params() const { return request->request.sampling; }

  // Input log-probs (engine/request.h): output.input_logprobs holds those of prompt tokens
  // [s, s + size) so far, s = max(logprob_start_len, 1). The next one owed is read off the
  // hidden state of the position before it: that position and every later one must be
  // computed, not taken from the prefix cache. -1 when none is owed (not asked, or all done).
  int64_t next_scored_position() const {
    const int64_t start = request->request.logprob_start_len;
    if (start < 0) return -1;
    const int64_t next_token =
        std::max<int64_t>(start, 1) + static_cast<int64_t>(output.input_logprobs.size());
    return next_token < prompt_length ? next_token - 1 : -1;
  }
};

}  // namespace ooze::engine
