// How one request samples, with SGLang's field names and defaults. The HTTP server fills it
// from JSON; library callers set the fields directly. validate() is the single place the rules
// live, so every entry point rejects the same inputs with the same words.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace ooze::engine {

// A request the engine cannot accept; `field` names the offending field ("sampling_params.top_p"),
// so the HTTP server can answer 400 with it.
class InvalidRequest : public Error {
 public:
  InvalidRequest(std::string field, const std::string& message)
      : Error(field + ": " + message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

struct SamplingParams {
  // 0 samples greedily (argmax). Log-probs are then reported under temperature 1.
  double temperature = 1.0;
  double top_p = 1.0;  // (0, 1]: keep the smallest set of tokens with this much mass
  int64_t top_k = -1;  // -1 (or 0): all tokens
  double min_p = 0.0;  // [0, 1]: drop tokens below min_p * the most likely one's probability
  int64_t max_new_tokens = 128;         // 0: compute the prompt only, finish with "length"
  std::vector<std::string> stop;        // stop strings, matched on the decoded output text
  std::vector<int64_t> stop_token_ids;  // finish after emitting one of these
  bool ignore_eos = false;
  int64_t n = 1;                    // samples drawn from the one prompt
  std::optional<uint64_t> seed;     // reproducible sampling; drawn at random when absent
  bool skip_special_tokens = true;  // in the returned text (and stop-string matching)

  // Throws InvalidRequest naming the first field out of range ("sampling_params.<name>").
  void validate() const;
};

}  // namespace ooze::engine
