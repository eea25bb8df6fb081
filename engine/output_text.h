// The text of one sequence's output as it grows, and its stop conditions.
//
// Byte-level BPE tokens each stand for whole bytes, so the output's bytes are the
// concatenation of every token's bytes and are kept incrementally (O(1) per token). Stop
// strings are searched in the bytes added by the last token plus the longest stop string's
// length before them, so a stop string spelled across several tokens is found the moment it is
// complete. The returned text stops before the match; output ids keep every sampled token.
//
//   OutputText out(tokenizer, params, eos_ids);
//   if (auto stop = out.append(token)) { finish(stop->reason, ...); }
//   out.text();  // decoded so far, without an incomplete trailing UTF-8 character
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/sampling_params.h"

namespace ooze::models {
class Tokenizer;
}

namespace ooze::engine {

struct StopMatch {
  FinishReason reason = FinishReason::kStop;  // kStop or kLength
  std::optional<std::string> matched_stop;    // the stop string
  std::optional<int64_t> matched_token;       // the stop or EOS token
};

class OutputText {
 public:
  // eos_token_ids stop the output unless params.ignore_eos; params.stop_token_ids always do.
  OutputText(const models::Tokenizer& tokenizer, const SamplingParams& params,
             std::vector<int64_t> eos_token_ids);

  // Adds the next sampled token; returns why the output must finish now, if it must:
  // a stop token, then a stop string, then max_new_tokens. A stop or EOS token's own text is
  // left out of text(), as SGLang does. Throws ooze::Error once the output has finished.
  std::optional<StopMatch> append(int64_t token_id);

  int64_t num_tokens() const { return num_tokens_; }
  // The output so far: valid UTF-8, an incomplete trailing character held back (replaced by
  // U+FFFD once finished), the matched stop string and anything after it removed. Bytes that
  // no later byte can make a character are replaced by U+FFFD at once.
  std::string text(bool finished) const;

 private:
  const models::Tokenizer& tokenizer_;
  SamplingParams params_;
  std::vector<int64_t> eos_token_ids_;
  size_t longest_stop_ = 0;
  int64_t num_tokens_ = 0;
  std::string bytes_;
  std::optional<size_t> stop_at_;  // byte offset where the matched stop string begins
};

}  // namespace ooze::engine
