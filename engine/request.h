// What goes into the engine and what comes out of it.
//
// A request of n samples becomes n sequences that share the prompt's cached blocks; each
// produces one GenerateOutput with its `index`. output_ids, output_logprobs and top_logprobs
// always cover the same tokens: every sampled token, including those that spelled a stop
// string (the returned text stops before the stop string, as SGLang's does).
//
// Log-prob definition: the log-prob of token t sampled at temperature T > 0 is
//   log softmax(logits / T)[t]
// over the whole vocabulary, with the logits computed in the model's dtype and upcast to fp32
// before the division: the distribution before top-k / top-p / min-p filtering, which is what
// models/log_probs.h computes for the trainer at the same temperature. For T == 0 (greedy) it
// is log softmax(logits)[t].
//
// Input (prompt) log-probs, asked for with logprob_start_len >= 0 (SGLang's field): with
// s = max(logprob_start_len, 1) and L the prompt length, input_logprobs[j] is
//   log p(input_ids[s + j] | input_ids[0 .. s + j)),  j = 0 .. L - s - 1
// (L - s values; none for input_ids[0], which nothing predicts). They are always at temperature
// 1, whatever the request samples at, as SGLang's are: log softmax(logits)[t] over the whole
// vocabulary, the same upcast as above. input_top_logprobs[j] (top_logprobs_num > 0) lists the
// most likely tokens at that same position. Every sample of a request gets the same ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"

namespace ooze::engine {

struct GenerateRequest {
  std::string id;                  // unique among live requests; the engine makes one when empty
  std::vector<int64_t> input_ids;  // the prompt, already tokenized (at least one token)
  SamplingParams sampling;
  bool return_logprob = false;
  int64_t top_logprobs_num = 0;  // also return the k most likely tokens at every position
  // The first prompt position whose log-prob is returned (see above); -1: none. At most the
  // prompt's length - 1. Positions from there on are computed, not taken from the prefix cache.
  int64_t logprob_start_len = -1;
  bool stream = false;  // deliver an update after every step, not only at the end
};

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* to_string(FinishReason reason);  // "", "stop", "length", "abort"

struct TopLogProb {
  int64_t token_id = 0;
  float logprob = 0.0f;
};

struct GenerateOutput {
  std::string request_id;
  int64_t index = 0;  // which of the request's n samples
  std::vector<int64_t> output_ids;
  std::string text;  // decoded output, stop string and what follows it removed; valid UTF-8
  std::vector<float> output_logprobs;                 // when return_logprob
  std::vector<std::vector<TopLogProb>> top_logprobs;  // when top_logprobs_num > 0
  // When logprob_start_len >= 0: the prompt's log-probs, aligned as described above.
  std::vector<float> input_logprobs;
  std::vector<std::vector<TopLogProb>> input_top_logprobs;  // and top_logprobs_num > 0
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  // kStop: the stop string matched, or the stop/EOS token id; kAbort: why.
  std::optional<std::string> matched_stop;
  std::optional<int64_t> matched_token;
  std::string abort_message;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose keys/values came from the prefix cache
  // The weight version that produced the last token, and every version that produced some
  // (more than one when weights were updated while the request was paused and kept).
  int64_t weight_version = 0;
  std::vector<int64_t> weight_versions;
  // The weight version that sampled each of output_ids: what lets the trainer correct for
  // staleness token by token when a request outlived a weight update.
  std::vector<int64_t> output_weight_versions;
  int64_t completion_tokens() const { return static_cast<int64_t>(output_ids.size()); }
};

}  // namespace ooze::engine
