#include "engine/prompt_checks.h"

#include "engine/sampling_params.h"
#include "models/tokenizer.h"

namespace ooze::engine {

void check_prompt_ids(const std::vector<int64_t>& ids, const std::string& field,
                      const EngineInfo& info) {
  if (ids.empty()) throw InvalidRequest(field, "the prompt is empty");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= info.vocab_size) {
      throw InvalidRequest(field, "token " + std::to_string(ids[i]) + " at position " +
                                      std::to_string(i) + " is outside the vocabulary [0, " +
                                      std::to_string(info.vocab_size) + ")");
    }
  }
  const int64_t length = static_cast<int64_t>(ids.size());
  if (info.context_length > 0 && length >= info.context_length) {
    throw InvalidRequest(field, "the prompt has " + std::to_string(length) +
                                    " tokens; the model's context holds " +
                                    std::to_string(info.context_length) +
                                    " (prompt and output together): shorten it");
  }
}

std::vector<int64_t> tokenize_prompt(const models::Tokenizer& tokenizer, const std::string& text,
                                     const std::string& field, const EngineInfo& info) {
  std::vector<int64_t> ids = tokenizer.encode(text);
  check_prompt_ids(ids, field, info);
  return ids;
}

}  // namespace ooze::engine
