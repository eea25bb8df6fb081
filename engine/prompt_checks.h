// Prompt checks shared by the HTTP protocols, done before anything reaches the engine so that a
// batch with one bad prompt is refused whole, with the field that is wrong ("text[3]").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace ooze::models {
class Tokenizer;
}

namespace ooze::engine {

// InvalidRequest(field) when the prompt is empty, holds an id outside [0, vocab_size), or
// leaves no room for output in the context.
void check_prompt_ids(const std::vector<int64_t>& ids, const std::string& field,
                      const EngineInfo& info);

// Tokenizes `text` (no special tokens added) and checks it as above.
std::vector<int64_t> tokenize_prompt(const models::Tokenizer& tokenizer, const std::string& text,
                                     const std::string& field, const EngineInfo& info);

}  // namespace ooze::engine
