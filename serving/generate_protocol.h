// SGLang's native /generate API as JSON <-> engine requests and outputs.
//
// Request body:
//   text | input_ids            one prompt (a string / a list of ids) or a batch (a list of
//                               strings / a list of id lists)
//   sampling_params             {temperature, top_p, top_k, min_p, max_new_tokens, stop,
//                               stop_token_ids, ignore_eos, n, seed, skip_special_tokens,
//                               no_stop_trim, spaces_between_special_tokens (accepted, no
//                               effect: byte-level tokenizers decode spaces themselves), and
//                               frequency_penalty / presence_penalty / repetition_penalty /
//                               min_new_tokens at their neutral values only}; for a batch also
//                               a list with one object per prompt
//   return_logprob, top_logprobs_num, return_text_in_logprobs, stream, rid (a string, or a list
//   with one per prompt), logprob_start_len (-1, or the first prompt position to score, below
//   the prompt's length; an integer, or a list with one per prompt)
//
// Response, per output: {text, output_ids, meta_info: {id, finish_reason, prompt_tokens,
// completion_tokens, cached_tokens, weight_version, output_token_logprobs, output_top_logprobs,
// and with logprob_start_len >= 0 input_token_logprobs, input_top_logprobs}}
// where finish_reason is {"type": "stop", "matched": string or token id} |
// {"type": "length", "length": completion tokens} | {"type": "abort", "message": why}, and
// log-probs are [logprob, token_id, text or null] triples (input_token_logprobs: one per prompt
// token from logprob_start_len on, the log-prob null for position 0). A batch or n > 1 answers with
// a list, prompt-major then sample index (SGLang's order); streamed events of such a call carry
// "index", the position in that list.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/engine.h"
#include "engine/request.h"

namespace ooze::models {
class Tokenizer;
}

namespace ooze::serving {

struct GenerateCall {
  std::vector<engine::GenerateRequest> requests;  // one per prompt, each with its n samples
  bool batch = false;                             // the prompt field was a list of prompts
  bool stream = false;
  bool return_text_in_logprobs = false;
  std::vector<bool> no_stop_trim;  // per request: keep the matched stop string in text
  bool answers_with_list() const { return batch || requests.front().sampling.n > 1; }
  size_t num_outputs() const;
};

// Throws InvalidRequest naming the field ("sampling_params.top_p", "text", "input_ids[2]").
// Prompts are tokenized and checked against the vocabulary and the context here, so a batch is
// refused before any of it reaches the engine.
GenerateCall parse_generate_call(const nlohmann::json& body, const models::Tokenizer& tokenizer,
                                 const engine::EngineInfo& info);

// The response object for one output of the call's request `request_index`.
nlohmann::json generate_output_json(const GenerateCall& call, size_t request_index,
                                    const engine::GenerateOutput& output,
                                    const models::Tokenizer& tokenizer);

// What a client of the router sends for `request`: its input_ids, sampling_params,
// return_logprob, top_logprobs_num, stream, logprob_start_len (when >= 0) and rid (when it has
// an id).
nlohmann::json generate_request_json(const engine::GenerateRequest& request);

// One output object of a /generate answer (or one streamed event), read back: the inverse of
// generate_output_json. Throws FormatError naming the missing or malformed field.
engine::GenerateOutput generate_output_from_json(const nlohmann::json& output);

// The /generate field an engine InvalidRequest field stands for ("input_ids" -> "text" when the
// prompt came as text).
std::string generate_param(const std::string& engine_field, const nlohmann::json& body);

}  // namespace ooze::serving
