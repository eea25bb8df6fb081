#include "engine/sampling_params.h"

#include <cmath>

namespace ooze::engine {
namespace {

void require(bool ok, const char* field, const std::string& message) {
  if (!ok) throw InvalidRequest(std::string("sampling_params.") + field, message);
}

}  // namespace

void SamplingParams::validate() const {
  require(std::isfinite(temperature) && temperature >= 0.0, "temperature",
          "must be a finite number >= 0 (0 samples greedily), got " + std::to_string(temperature));
  require(std::isfinite(top_p) && top_p > 0.0 && top_p <= 1.0, "top_p",
          "must be in (0, 1], got " + std::to_string(top_p));
  require(top_k == -1 || top_k >= 0, "top_k",
          "must be -1 or 0 (all tokens) or a positive count, got " + std::to_string(top_k));
  require(std::isfinite(min_p) && min_p >= 0.0 && min_p <= 1.0, "min_p",
          "must be in [0, 1], got " + std::to_string(min_p));
  // 0, as SGLang: only the prompt is computed (to score it: logprob_start_len).
  require(max_new_tokens >= 0, "max_new_tokens",
          "must be >= 0, got " + std::to_string(max_new_tokens));
  require(n >= 1 && n <= 1024, "n", "must be in [1, 1024], got " + std::to_string(n));
  for (size_t i = 0; i < stop.size(); ++i) {
    require(!stop[i].empty(), "stop", "stop string " + std::to_string(i) + " is empty");
  }
  for (int64_t id : stop_token_ids) {
    require(id >= 0, "stop_token_ids", "token ids are >= 0, got " + std::to_string(id));
  }
}

}  // namespace ooze::engine
