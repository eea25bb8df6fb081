// The OpenAI completions and chat completions APIs as JSON <-> engine requests and outputs,
// with the fields users of the OpenAI API and SGLang send.
//
// Both: model (any name; responses report the served one), max_tokens (chat also
// max_completion_tokens), temperature, top_p, n, stop, seed, stream, stream_options
// {include_usage}, user (ignored), rid (a request id, for /abort_request), and SGLang's top_k,
// min_p, ignore_eos, skip_special_tokens, stop_token_ids, no_stop_trim. frequency_penalty,
// presence_penalty, repetition_penalty, min_tokens and logit_bias are accepted at their neutral
// values only.
//   completions: prompt (a string, a list of strings, a list of ids, or a list of id lists),
//                logprobs (int k: the sampled token and the k most likely, k <= 20), echo and
//                suffix (unset only), best_of (unset or 1); max_tokens defaults to 16.
//   chat:        messages ({role: system|developer|user|assistant|tool, content: a string or
//                text parts, name (ignored), reasoning_content, tool_calls (assistant),
//                tool_call_id (tool, not rendered)}), rendered with the model's chat template
//                plus the generation prompt; logprobs (bool) and top_logprobs (0..20);
//                chat_template_kwargs {enable_thinking}; tools ({type: "function", function:
//                {name, description, parameters}}) rendered by the template, tool_choice "auto"
//                or "none" (tools then left out of the prompt), parallel_tool_calls (accepted);
//                response_format only plain text. Without max_tokens the output may fill the
//                context (as SGLang).
//                With tools, a completion in the template's tool-call syntax answers with
//                message.tool_calls ({id, type: "function", function: {name, arguments}}),
//                content (null when none) and finish_reason "tool_calls"; a completion whose
//                tool-call syntax is malformed stays plain content (models/tool_call_parser.h).
//
// Choices are numbered prompt-major, then sample: choice = prompt * n + sample. finish_reason
// is "stop", "length" or "abort"; SGLang's matched_stop (the stop string or token id) is added
// to each choice.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/request.h"

namespace ooze::models {
class Tokenizer;
class ChatTemplate;
}  // namespace ooze::models

namespace ooze::serving {

enum class OpenAiApi { kCompletions, kChat };

struct OpenAiCall {
  OpenAiApi api = OpenAiApi::kCompletions;
  std::vector<engine::GenerateRequest> requests;  // one per prompt, each with the call's n samples
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // report the sampled tokens' log-probs
  int64_t top_logprobs = 0;    // ... and this many most likely tokens at each position
  bool no_stop_trim = false;   // keep the matched stop string in the text
  // Per request: the prompt as text when it came as text or messages (the rendered
  // conversation); empty when it came as token ids.
  std::vector<std::string> prompt_texts;
  // Set when the call offered tools: completions are parsed for calls in its syntax.
  const models::ChatTemplate* tool_syntax = nullptr;

  size_t num_choices() const;
  size_t request_of_choice(size_t choice) const;  // which prompt a choice belongs to
};

// Throw InvalidRequest naming the OpenAI field ("max_tokens", "messages[1].role").
OpenAiCall parse_completions_call(const nlohmann::json& body, const models::Tokenizer& tokenizer,
                                  const engine::EngineInfo& info);
// chat_template may be null when the model has none: `no_template_reason` then says why, and
// the request is refused.
OpenAiCall parse_chat_call(const nlohmann::json& body, const models::Tokenizer& tokenizer,
                           const models::ChatTemplate* chat_template,
                           const std::string& no_template_reason, const engine::EngineInfo& info);

// The OpenAI field an engine InvalidRequest field stands for ("sampling_params.max_new_tokens"
// -> "max_tokens").
std::string openai_param(const std::string& engine_field, OpenAiApi api);

// The whole response of a call that did not stream; outputs in choice order.
nlohmann::json openai_response(const OpenAiCall& call,
                               const std::vector<engine::GenerateOutput>& outputs,
                               const std::string& id, int64_t created, const std::string& model,
                               const models::Tokenizer& tokenizer);

// A streamed response: turns each choice's cumulative outputs into chunk objects carrying only
// what is new. Text that could be the start of a stop string is held back until it is known not
// to be one, so the concatenated deltas equal the final text.
class OpenAiStream {
 public:
  OpenAiStream(const OpenAiCall& call, std::string id, int64_t created, std::string model,
               const models::Tokenizer& tokenizer);

  // The chunks to send for the latest output of `choice` (none when nothing changed). The
  // chat API's first chunk of a choice carries delta.role; the last one the finish_reason.
  std::vector<nlohmann::json> update(size_t choice, const engine::GenerateOutput& output);
  // With include_usage, after every choice finished: {choices: [], usage: {...}}.
  nlohmann::json usage_chunk() const;

 private:
  struct ChoiceState {
    bool started = false;
    bool finished = false;
    size_t sent_bytes = 0;   // of the text
    size_t sent_tokens = 0;  // of output_ids (log-probs)
    size_t text_offset = 0;  // completions logprobs.text_offset
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;
  };
  nlohmann::json chunk(size_t choice, nlohmann::json delta_or_text, nlohmann::json logprobs,
                       nlohmann::json finish_reason) const;

  const OpenAiCall& call_;
  std::string id_;
  int64_t created_;
  std::string model_;
  const models::Tokenizer& tokenizer_;
  std::vector<ChoiceState> choices_;
};

}  // namespace ooze::serving
