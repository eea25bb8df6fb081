#include "serving/openai_protocol.h"

#include <algorithm>

#include "core/error.h"
#include "engine/prompt_checks.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "models/tool_call_parser.h"
#include "models/unicode_utils.h"
#include "serving/json_fields.h"

namespace ooze::serving {
namespace {

constexpr int64_t kMaxTopLogprobs = 20;

void require_neutral_openai(JsonFields& fields, const std::string& key, double neutral) {
  if (std::optional<double> value = fields.number(key); value && *value != neutral) {
    throw engine::InvalidRequest(key, "is not supported by this server; only " +
                                          std::to_string(neutral) + " (no effect) is accepted");
  }
}

void require_empty(JsonFields& fields, const std::string& key, const std::string& why) {
  const nlohmann::json* value = fields.raw(key);
  if (value && !value->empty()) throw engine::InvalidRequest(key, why);
}

// The fields both APIs share: sampling, streaming, ids and the neutral-only penalties.
void parse_common(JsonFields& fields, OpenAiCall& call, engine::SamplingParams& params,
                  std::string& rid) {
  fields.string("model");
  fields.string("user");
  if (auto v = fields.number("temperature")) params.temperature = *v;
  if (auto v = fields.number("top_p")) params.top_p = *v;
  if (auto v = fields.integer("n")) params.n = *v;
  if (const nlohmann::json* stop = fields.raw("stop")) {
    params.stop = json_string_or_strings(*stop, "stop");
  }
  if (auto v = fields.integer("seed")) {
    if (*v < 0) throw engine::InvalidRequest("seed", "must be >= 0");
    params.seed = static_cast<uint64_t>(*v);
  }
  call.stream = fields.boolean("stream").value_or(false);
  if (const nlohmann::json* options = fields.raw("stream_options")) {
    JsonFields stream_options(*options, "stream_options");
    call.include_usage = stream_options.boolean("include_usage").value_or(false);
    stream_options.boolean("continuous_usage_stats");
    stream_options.reject_unknown();
    if (!call.stream) {
      throw engine::InvalidRequest("stream_options", "is only allowed when stream is true");
    }
  }
  if (auto v = fields.integer("top_k")) params.top_k = *v;
  if (auto v = fields.number("min_p")) params.min_p = *v;
  if (auto v = fields.boolean("ignore_eos")) params.ignore_eos = *v;
  if (auto v = fields.boolean("skip_special_tokens")) params.skip_special_tokens = *v;
  if (const nlohmann::json* ids = fields.raw("stop_token_ids")) {
    params.stop_token_ids = json_integer_list(*ids, "stop_token_ids");
  }
  call.no_stop_trim = fields.boolean("no_stop_trim").value_or(false);
  if (auto v = fields.string("rid")) rid = *v;
  require_neutral_openai(fields, "frequency_penalty", 0.0);
  require_neutral_openai(fields, "presence_penalty", 0.0);
  require_neutral_openai(fields, "repetition_penalty", 1.0);
  require_neutral_openai(fields, "min_tokens", 0.0);
  require_empty(fields, "logit_bias", "logit_bias is not supported by this server");
}

void finish_call(OpenAiCall& call, std::vector<std::vector<int64_t>> prompts,
                 const engine::SamplingParams& params, const std::string& rid) {
  try {
    params.validate();
    // The engine takes 0 (score the prompt only, /generate); OpenAI's APIs ask for output.
    if (params.max_new_tokens < 1) {
      throw engine::InvalidRequest("sampling_params.max_new_tokens",
                                   "must be >= 1, got " + std::to_string(params.max_new_tokens));
    }
  } catch (const engine::InvalidRequest& e) {
    const std::string prefix = e.field() + ": ";
    std::string message = e.what();
    if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
    throw engine::InvalidRequest(openai_param(e.field(), call.api), message);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::GenerateRequest request;
    if (!rid.empty()) request.id = prompts.size() == 1 ? rid : rid + "-" + std::to_string(i);
    request.input_ids = std::move(prompts[i]);
    request.sampling = params;
    request.return_logprob = call.logprobs;
    request.top_logprobs_num = call.top_logprobs;
    request.stream = call.stream;
    call.requests.push_back(std::move(request));
  }
}

const char* finish_reason_name(const engine::GenerateOutput& output) {
  if (!output.finished) return nullptr;
  return to_string(output.finish_reason);
}

nlohmann::json matched_stop(const engine::GenerateOutput& output) {
  if (output.matched_stop) return *output.matched_stop;
  if (output.matched_token) return *output.matched_token;
  return nullptr;
}

std::string final_text(const OpenAiCall& call, const engine::GenerateOutput& output) {
  if (call.no_stop_trim && output.finished && output.matched_stop) {
    return output.text + *output.matched_stop;
  }
  return output.text;
}

// The calls of a finished chat completion, when the call offered tools and the model ended its
// turn in the template's tool-call syntax.
std::optional<models::ParsedToolCalls> tool_calls_of(const OpenAiCall& call,
                                                     const engine::GenerateOutput& output,
                                                     const std::string& text) {
  if (!call.tool_syntax || !output.finished ||
      output.finish_reason != engine::FinishReason::kStop) {
    return std::nullopt;
  }
  return models::parse_tool_calls(text, *call.tool_syntax);
}

// OpenAI's tool_calls list; ids are unique per response and choice.
nlohmann::json tool_calls_json(const models::ParsedToolCalls& parsed,
                               const std::string& response_id, size_t choice, bool with_index) {
  nlohmann::json calls = nlohmann::json::array();
  for (size_t i = 0; i < parsed.calls.size(); ++i) {
    nlohmann::json entry = {
        {"id", "call_" + response_id.substr(response_id.find('-') + 1) + "_" +
                   std::to_string(choice) + "_" + std::to_string(i)},
        {"type", "function"},
        {"function", {{"name", parsed.calls[i].name}, {"arguments", parsed.calls[i].arguments}}}};
    if (with_index) entry["index"] = i;
    calls.push_back(std::move(entry));
  }
  return calls;
}

// Log-prob entries of tokens [begin, end) in each API's shape.
struct TokenText {
  std::string bytes;  // what the token decodes to
  std::string text;   // the same as valid UTF-8
};

TokenText token_text(const models::Tokenizer& tokenizer, int64_t id) {
  TokenText out;
  out.bytes = tokenizer.decode({id});
  out.text = models::utf8_lossy(out.bytes);
  return out;
}

nlohmann::json byte_list(const std::string& bytes) {
  nlohmann::json list = nlohmann::json::array();
  for (unsigned char c : bytes) list.push_back(static_cast<int>(c));
  return list;
}

nlohmann::json chat_logprobs(const engine::GenerateOutput& output, size_t begin, size_t end,
                             const OpenAiCall& call, const models::Tokenizer& tokenizer) {
  nlohmann::json content = nlohmann::json::array();
  for (size_t i = begin; i < end && i < output.output_logprobs.size(); ++i) {
    const TokenText token = token_text(tokenizer, output.output_ids[i]);
    nlohmann::json top = nlohmann::json::array();
    if (call.top_logprobs > 0 && i < output.top_logprobs.size()) {
      for (const engine::TopLogProb& entry : output.top_logprobs[i]) {
        const TokenText alternative = token_text(tokenizer, entry.token_id);
        top.push_back({{"token", alternative.text},
                       {"logprob", entry.logprob},
                       {"bytes", byte_list(alternative.bytes)}});
      }
    }
    content.push_back({{"token", token.text},
                       {"logprob", output.output_logprobs[i]},
                       {"bytes", byte_list(token.bytes)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

nlohmann::json completion_logprobs(const engine::GenerateOutput& output, size_t begin, size_t end,
                                   size_t* text_offset, const OpenAiCall& call,
                                   const models::Tokenizer& tokenizer) {
  nlohmann::json tokens = nlohmann::json::array(), token_logprobs = nlohmann::json::array(),
                 top_logprobs = nlohmann::json::array(), offsets = nlohmann::json::array();
  for (size_t i = begin; i < end && i < output.output_logprobs.size(); ++i) {
    const TokenText token = token_text(tokenizer, output.output_ids[i]);
    tokens.push_back(token.text);
    token_logprobs.push_back(output.output_logprobs[i]);
    offsets.push_back(*text_offset);
    *text_offset += token.bytes.size();
    if (call.top_logprobs > 0) {
      nlohmann::json top = nlohmann::json::object();
      if (i < output.top_logprobs.size()) {
        for (const engine::TopLogProb& entry : output.top_logprobs[i]) {
          top[token_text(tokenizer, entry.token_id).text] = entry.logprob;
        }
      }
      top_logprobs.push_back(std::move(top));
    }
  }
  return {
      {"tokens", std::move(tokens)},
      {"token_logprobs", std::move(token_logprobs)},
      {"top_logprobs", call.top_logprobs > 0 ? std::move(top_logprobs) : nlohmann::json(nullptr)},
      {"text_offset", std::move(offsets)}};
}

// The longest end of `text` that is the start of some stop string: it may still become a stop
// string, so a stream does not send it yet.
size_t stop_prefix_length(const std::string& text, const std::vector<std::string>& stops) {
  size_t longest = 0;
  for (const std::string& stop : stops) {
    if (stop.empty()) continue;
    for (size_t length = std::min(stop.size() - 1, text.size()); length > longest; --length) {
      if (text.compare(text.size() - length, length, stop, 0, length) == 0) {
        longest = length;
        break;
      }
    }
  }
  return longest;
}

// Do not cut a UTF-8 character in two when holding text back.
size_t utf8_boundary(const std::string& text, size_t at) {
  while (at > 0 && at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  return at;
}

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}],
// arguments as the JSON text the API sends (an object is accepted and written out).
std::vector<models::ToolCall> parse_tool_calls_field(const nlohmann::json& calls,
                                                     const std::string& path) {
  if (!calls.is_array()) throw engine::InvalidRequest(path, "must be a list of tool calls");
  std::vector<models::ToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string call_path = path + "[" + std::to_string(i) + "]";
    JsonFields call(calls[i], call_path);
    call.string("id");
    if (auto type = call.string("type"); type && *type != "function") {
      throw engine::InvalidRequest(call_path + ".type", "must be \"function\"");
    }
    const nlohmann::json* function = call.raw("function");
    if (!function) throw engine::InvalidRequest(call_path + ".function", "is required");
    call.reject_unknown();
    JsonFields function_fields(*function, call_path + ".function");
    models::ToolCall tool_call;
    const std::optional<std::string> name = function_fields.string("name");
    if (!name || name->empty()) {
      throw engine::InvalidRequest(call_path + ".function.name", "is required");
    }
    tool_call.name = *name;
    const nlohmann::json* arguments = function_fields.raw("arguments");
    if (!arguments || arguments->is_null()) {
      tool_call.arguments = "{}";
    } else if (arguments->is_string()) {
      tool_call.arguments = arguments->get<std::string>();
    } else if (arguments->is_object()) {
      tool_call.arguments = arguments->dump();
    } else {
      throw engine::InvalidRequest(call_path + ".function.arguments",
                                   "must be a JSON object as a string");
    }
    function_fields.reject_unknown();
    out.push_back(std::move(tool_call));
  }
  return out;
}

// The request's tools as the template writes them: {"type": "function", "function": {name,
// description, parameters}} in that order (as SGLang's request model dumps them).
models::ChatTools parse_tools(const nlohmann::json& tools) {
  if (!tools.is_array()) throw engine::InvalidRequest("tools", "must be a list of tools");
  models::ChatTools out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string path = "tools[" + std::to_string(i) + "]";
    JsonFields tool(tools[i], path);
    if (tool.string("type").value_or("function") != "function") {
      throw engine::InvalidRequest(path + ".type", "must be \"function\"");
    }
    const nlohmann::json* function = tool.raw("function");
    if (!function) throw engine::InvalidRequest(path + ".function", "is required");
    tool.reject_unknown();
    JsonFields fields(*function, path + ".function");
    nlohmann::ordered_json written;
    const std::optional<std::string> name = fields.string("name");
    if (!name || name->empty())
      throw engine::InvalidRequest(path + ".function.name", "is required");
    written["name"] = *name;
    if (auto description = fields.string("description")) written["description"] = *description;
    if (const nlohmann::json* parameters = fields.raw("parameters")) {
      if (!parameters->is_object()) {
        throw engine::InvalidRequest(path + ".function.parameters", "must be a JSON schema object");
      }
      written["parameters"] = nlohmann::ordered_json::parse(parameters->dump());
    }
    fields.boolean("strict");
    fields.reject_unknown();
    nlohmann::ordered_json entry;
    entry["type"] = "function";
    entry["function"] = std::move(written);
    out.push_back(std::move(entry));
  }
  return out;
}

std::vector<models::ChatMessage> parse_messages(const nlohmann::json* messages) {
  if (!messages) throw engine::InvalidRequest("messages", "is required");
  if (!messages->is_array() || messages->empty()) {
    throw engine::InvalidRequest("messages", "must be a non-empty list of messages");
  }
  std::vector<models::ChatMessage> out;
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string path = "messages[" + std::to_string(i) + "]";
    JsonFields fields((*messages)[i], path);
    models::ChatMessage message;
    const std::optional<std::string> role = fields.string("role");
    if (!role) throw engine::InvalidRequest(path + ".role", "is required");
    message.role = *role == "developer" ? "system" : *role;
    if (message.role != "system" && message.role != "user" && message.role != "assistant" &&
        message.role != "tool") {
      throw engine::InvalidRequest(path + ".role",
                                   "'" + *role +
                                       "' is not supported; use system, developer, user, "
                                       "assistant or tool");
    }
    const nlohmann::json* content = fields.raw("content");
    if (content && content->is_null() && message.role == "assistant") content = nullptr;
    if (content) {
      if (content->is_string()) {
        message.content = content->get<std::string>();
      } else if (content->is_array()) {
        for (size_t p = 0; p < content->size(); ++p) {
          const std::string part_path = path + ".content[" + std::to_string(p) + "]";
          JsonFields part((*content)[p], part_path);
          const std::optional<std::string> type = part.string("type");
          if (type != "text") {
            throw engine::InvalidRequest(part_path + ".type",
                                         "only text content parts are supported");
          }
          const std::optional<std::string> text = part.string("text");
          if (!text) throw engine::InvalidRequest(part_path + ".text", "is required");
          part.reject_unknown();
          message.content += (p == 0 ? "" : "\n") + *text;
        }
      } else {
        throw engine::InvalidRequest(path + ".content", "must be a string or a list of text parts");
      }
    } else if (message.role != "assistant") {
      throw engine::InvalidRequest(path + ".content", "is required");
    }
    if (auto reasoning = fields.string("reasoning_content")) message.reasoning_content = *reasoning;
    if (const nlohmann::json* calls = fields.raw("tool_calls"); calls && !calls->is_null()) {
      if (message.role != "assistant") {
        throw engine::InvalidRequest(path + ".tool_calls",
                                     "only assistant messages make tool calls");
      }
      message.tool_calls = parse_tool_calls_field(*calls, path + ".tool_calls");
    }
    fields.string("tool_call_id");
    fields.string("name");
    fields.reject_unknown();
    out.push_back(std::move(message));
  }
  return out;
}

}  // namespace

size_t OpenAiCall::num_choices() const {
  size_t total = 0;
  for (const engine::GenerateRequest& request : requests)
    total += static_cast<size_t>(request.sampling.n);
  return total;
}

size_t OpenAiCall::request_of_choice(size_t choice) const {
  for (size_t i = 0; i < requests.size(); ++i) {
    const size_t n = static_cast<size_t>(requests[i].sampling.n);
    if (choice < n) return i;
    choice -= n;
  }
  return requests.size() - 1;
}

OpenAiCall parse_completions_call(const nlohmann::json& body, const models::Tokenizer& tokenizer,
                                  const engine::EngineInfo& info) {
  JsonFields fields(body, "");
  OpenAiCall call;
  call.api = OpenAiApi::kCompletions;
  engine::SamplingParams params;
  params.max_new_tokens = 16;  // OpenAI's default for completions
  std::string rid;
  parse_common(fields, call, params, rid);
  if (auto v = fields.integer("max_tokens")) params.max_new_tokens = *v;
  if (auto v = fields.integer("logprobs")) {
    if (*v < 0 || *v > kMaxTopLogprobs) {
      throw engine::InvalidRequest("logprobs", "must be in [0, " + std::to_string(kMaxTopLogprobs) +
                                                   "], got " + std::to_string(*v));
    }
    call.logprobs = true;
    call.top_logprobs = *v;
  }
  if (fields.boolean("echo").value_or(false)) {
    throw engine::InvalidRequest("echo", "echo is not supported by this server");
  }
  if (auto suffix = fields.string("suffix"); suffix && !suffix->empty()) {
    throw engine::InvalidRequest("suffix", "suffix is not supported by this server");
  }
  if (auto best_of = fields.integer("best_of"); best_of && *best_of != 1) {
    throw engine::InvalidRequest("best_of", "only best_of = 1 is supported");
  }

  const nlohmann::json* prompt = fields.raw("prompt");
  if (!prompt) throw engine::InvalidRequest("prompt", "is required");
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::string> texts;
  if (prompt->is_string()) {
    texts.push_back(prompt->get<std::string>());
    prompts.push_back(engine::tokenize_prompt(tokenizer, texts.back(), "prompt", info));
  } else if (prompt->is_array() && !prompt->empty()) {
    const nlohmann::json& first = (*prompt)[0];
    if (first.is_string()) {
      for (size_t i = 0; i < prompt->size(); ++i) {
        const std::string field = "prompt[" + std::to_string(i) + "]";
        texts.push_back(json_string((*prompt)[i], field));
        prompts.push_back(engine::tokenize_prompt(tokenizer, texts.back(), field, info));
      }
    } else if (first.is_array()) {
      for (size_t i = 0; i < prompt->size(); ++i) {
        const std::string field = "prompt[" + std::to_string(i) + "]";
        prompts.push_back(json_integer_list((*prompt)[i], field));
        engine::check_prompt_ids(prompts.back(), field, info);
      }
    } else {
      prompts.push_back(json_integer_list(*prompt, "prompt"));
      engine::check_prompt_ids(prompts.back(), "prompt", info);
    }
  } else {
    throw engine::InvalidRequest(
        "prompt",
        "must be a string, a list of strings, a list of token ids or a list of "
        "token id lists (not empty)");
  }
  fields.reject_unknown();
  texts.resize(prompts.size());  // empty for prompts sent as ids
  finish_call(call, std::move(prompts), params, rid);
  call.prompt_texts = std::move(texts);
  return call;
}

OpenAiCall parse_chat_call(const nlohmann::json& body, const models::Tokenizer& tokenizer,
                           const models::ChatTemplate* chat_template,
                           const std::string& no_template_reason, const engine::EngineInfo& info) {
  JsonFields fields(body, "");
  OpenAiCall call;
  call.api = OpenAiApi::kChat;
  engine::SamplingParams params;
  std::string rid;
  parse_common(fields, call, params, rid);
  std::optional<int64_t> max_tokens = fields.integer("max_completion_tokens");
  if (auto v = fields.integer("max_tokens")) max_tokens = *v;
  call.logprobs = fields.boolean("logprobs").value_or(false);
  if (auto v = fields.integer("top_logprobs")) {
    if (*v < 0 || *v > kMaxTopLogprobs) {
      throw engine::InvalidRequest(
          "top_logprobs",
          "must be in [0, " + std::to_string(kMaxTopLogprobs) + "], got " + std::to_string(*v));
    }
    if (!call.logprobs && *v > 0) {
      throw engine::InvalidRequest("top_logprobs", "needs logprobs set to true");
    }
    call.top_logprobs = *v;
  }
  models::ChatTools tools;
  if (const nlohmann::json* listed = fields.raw("tools"); listed && !listed->is_null()) {
    tools = parse_tools(*listed);
  }
  if (const nlohmann::json* choice = fields.raw("tool_choice")) {
    if (*choice == "none") {
      tools.clear();  // the model is not told of them and its output is not parsed for calls
    } else if (*choice != "auto") {
      throw engine::InvalidRequest("tool_choice",
                                   "only \"auto\" and \"none\" are supported (this server does "
                                   "not constrain decoding to force a call)");
    }
  }
  fields.boolean("parallel_tool_calls");
  if (const nlohmann::json* format = fields.raw("response_format")) {
    if (!format->is_object() || format->value("type", "") != "text" || format->size() != 1) {
      throw engine::InvalidRequest("response_format", "only {\"type\": \"text\"} is supported");
    }
  }
  bool enable_thinking = true;
  if (const nlohmann::json* kwargs = fields.raw("chat_template_kwargs")) {
    JsonFields template_fields(*kwargs, "chat_template_kwargs");
    enable_thinking = template_fields.boolean("enable_thinking").value_or(true);
    template_fields.reject_unknown();
  }
  const std::vector<models::ChatMessage> messages = parse_messages(fields.raw("messages"));
  fields.reject_unknown();

  if (!chat_template) {
    throw engine::InvalidRequest("messages", "this model has no usable chat template (" +
                                                 no_template_reason +
                                                 "); send a prompt to /v1/completions instead");
  }
  if (!tools.empty() && !chat_template->supports_tools()) {
    throw engine::InvalidRequest(
        "tools", "the model's chat template (" + chat_template->name() + ") has no tool syntax");
  }
  std::string text;
  try {
    text = chat_template->render(messages, /*add_generation_prompt=*/true, enable_thinking, tools);
  } catch (const Error& e) {
    throw engine::InvalidRequest("messages", e.what());
  }
  std::vector<int64_t> ids = engine::tokenize_prompt(tokenizer, text, "messages", info);
  if (!tools.empty()) call.tool_syntax = chat_template;
  if (max_tokens) {
    params.max_new_tokens = *max_tokens;
  } else {
    // As SGLang: the output may fill what the context (and the KV cache) leaves.
    const int64_t room = std::min(info.context_length, info.num_blocks * info.block_size) -
                         static_cast<int64_t>(ids.size());
    params.max_new_tokens = std::max<int64_t>(1, room);
  }
  finish_call(call, {std::move(ids)}, params, rid);
  call.prompt_texts = {std::move(text)};
  return call;
}

std::string openai_param(const std::string& engine_field, OpenAiApi api) {
  const std::string prefix = "sampling_params.";
  if (engine_field == "input_ids") return api == OpenAiApi::kChat ? "messages" : "prompt";
  if (engine_field == "top_logprobs_num") {
    return api == OpenAiApi::kChat ? "top_logprobs" : "logprobs";
  }
  if (engine_field.rfind(prefix, 0) == 0) {
    const std::string name = engine_field.substr(prefix.size());
    return name == "max_new_tokens" ? "max_tokens" : name;
  }
  return engine_field;
}

nlohmann::json openai_response(const OpenAiCall& call,
                               const std::vector<engine::GenerateOutput>& outputs,
                               const std::string& id, int64_t created, const std::string& model,
                               const models::Tokenizer& tokenizer) {
  nlohmann::json choices = nlohmann::json::array();
  int64_t completion_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  for (const engine::GenerateRequest& request : call.requests) {
    prompt_tokens += static_cast<int64_t>(request.input_ids.size());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const engine::GenerateOutput& output = outputs[i];
    completion_tokens += output.completion_tokens();
    if (output.index == 0) cached_tokens += output.cached_tokens;
    const std::string text = final_text(call, output);
    nlohmann::json choice = {{"index", i}};
    nlohmann::json logprobs = nullptr;
    const char* reason = finish_reason_name(output);
    if (call.api == OpenAiApi::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
      if (auto parsed = tool_calls_of(call, output, text)) {
        choice["message"]["content"] =
            parsed->content.empty() ? nlohmann::json(nullptr) : nlohmann::json(parsed->content);
        choice["message"]["tool_calls"] = tool_calls_json(*parsed, id, i, /*with_index=*/false);
        reason = "tool_calls";
      }
      if (call.logprobs) {
        logprobs = chat_logprobs(output, 0, output.output_ids.size(), call, tokenizer);
      }
    } else {
      choice["text"] = text;
      if (call.logprobs) {
        size_t offset = 0;
        logprobs =
            completion_logprobs(output, 0, output.output_ids.size(), &offset, call, tokenizer);
      }
    }
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = reason ? nlohmann::json(reason) : nlohmann::json(nullptr);
    choice["matched_stop"] = matched_stop(output);
    choices.push_back(std::move(choice));
  }
  return {{"id", id},
          {"object", call.api == OpenAiApi::kChat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", std::move(choices)},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}}}};
}

OpenAiStream::OpenAiStream(const OpenAiCall& call, std::string id, int64_t created,
                           std::string model, const models::Tokenizer& tokenizer)
    : call_(call),
      id_(std::move(id)),
      created_(created),
      model_(std::move(model)),
      tokenizer_(tokenizer),
      choices_(call.num_choices()) {}

nlohmann::json OpenAiStream::chunk(size_t choice, nlohmann::json delta_or_text,
                                   nlohmann::json logprobs, nlohmann::json finish_reason) const {
  nlohmann::json entry = {{"index", choice}};
  if (call_.api == OpenAiApi::kChat) {
    entry["delta"] = std::move(delta_or_text);
  } else {
    entry["text"] = std::move(delta_or_text);
  }
  entry["logprobs"] = std::move(logprobs);
  entry["finish_reason"] = std::move(finish_reason);
  nlohmann::json out = {
      {"id", id_},
      {"object", call_.api == OpenAiApi::kChat ? "chat.completion.chunk" : "text_completion"},
      {"created", created_},
      {"model", model_},
      {"choices", nlohmann::json::array({std::move(entry)})}};
  if (call_.include_usage) out["usage"] = nullptr;
  return out;
}

std::vector<nlohmann::json> OpenAiStream::update(size_t choice,
                                                 const engine::GenerateOutput& output) {
  std::vector<nlohmann::json> chunks;
  if (choice >= choices_.size()) return chunks;
  ChoiceState& state = choices_[choice];
  if (state.finished) return chunks;
  const bool chat = call_.api == OpenAiApi::kChat;
  if (chat && !state.started) {
    chunks.push_back(chunk(choice, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
  }
  state.started = true;

  const std::string text = final_text(call_, output);
  size_t ready = text.size();
  if (!output.finished) {
    const auto& stops = call_.requests[call_.request_of_choice(choice)].sampling.stop;
    ready = utf8_boundary(text, text.size() - stop_prefix_length(text, stops));
  }
  // With tools, text that may be a tool call is held back until the choice finishes: then it
  // goes out as tool_calls, or as content when it does not parse.
  std::optional<models::ParsedToolCalls> parsed;
  if (chat && call_.tool_syntax) {
    if (output.finished) parsed = tool_calls_of(call_, output, text);
    if (!output.finished || parsed) {
      ready = std::min(ready, models::tool_call_hold_from(text, *call_.tool_syntax));
    }
  }
  std::string delta;
  if (ready > state.sent_bytes) {
    delta = text.substr(state.sent_bytes, ready - state.sent_bytes);
    state.sent_bytes = ready;
  }
  const size_t tokens = call_.logprobs ? output.output_logprobs.size() : 0;
  nlohmann::json logprobs = nullptr;
  if (tokens > state.sent_tokens) {
    logprobs = chat ? chat_logprobs(output, state.sent_tokens, tokens, call_, tokenizer_)
                    : completion_logprobs(output, state.sent_tokens, tokens, &state.text_offset,
                                          call_, tokenizer_);
    state.sent_tokens = tokens;
  }
  if (!delta.empty() || !logprobs.is_null()) {
    chunks.push_back(chunk(choice,
                           chat ? nlohmann::json{{"content", delta}} : nlohmann::json(delta),
                           std::move(logprobs), nullptr));
  }
  if (parsed) {
    chunks.push_back(
        chunk(choice, {{"tool_calls", tool_calls_json(*parsed, id_, choice, /*with_index=*/true)}},
              nullptr, nullptr));
  }
  if (output.finished) {
    state.finished = true;
    state.completion_tokens = output.completion_tokens();
    state.cached_tokens = output.index == 0 ? output.cached_tokens : 0;
    nlohmann::json last = chunk(choice, chat ? nlohmann::json::object() : nlohmann::json(""),
                                nullptr, parsed ? "tool_calls" : finish_reason_name(output));
    last["choices"][0]["matched_stop"] = matched_stop(output);
    chunks.push_back(std::move(last));
  }
  return chunks;
}

nlohmann::json OpenAiStream::usage_chunk() const {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  for (const engine::GenerateRequest& request : call_.requests) {
    prompt_tokens += static_cast<int64_t>(request.input_ids.size());
  }
  for (const ChoiceState& state : choices_) {
    completion_tokens += state.completion_tokens;
    cached_tokens += state.cached_tokens;
  }
  return {{"id", id_},
          {"object", call_.api == OpenAiApi::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", nlohmann::json::array()},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}}}};
}

}  // namespace ooze::serving
