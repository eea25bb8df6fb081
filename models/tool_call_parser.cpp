#include "models/tool_call_parser.h"

#include <nlohmann/json.hpp>

#include "models/python_json.h"
#include "models/unicode_utils.h"

namespace ooze::models {

namespace {

const std::string kToolCallOpen = "<tool_call>";
const std::string kToolCallClose = "</tool_call>";
const std::string kPythonTag = "<|python_tag|>";

bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_json_space(const std::string& text, size_t at) {
  while (at < text.size() && is_json_space(text[at])) ++at;
  return at;
}

// The end of the JSON string that starts at text[at] (its opening quote).
size_t skip_json_string(const std::string& text, size_t at) {
  for (++at; at < text.size() && text[at] != '"'; ++at) {
    if (text[at] == '\\') ++at;
  }
  return at + 1;
}

// The end of the JSON value that starts at text[at]; `text` is known to be valid JSON.
size_t skip_json_value(const std::string& text, size_t at) {
  if (text[at] == '"') return skip_json_string(text, at);
  if (text[at] == '{' || text[at] == '[') {
    int depth = 0;
    while (at < text.size()) {
      const char c = text[at];
      if (c == '"') {
        at = skip_json_string(text, at);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') --depth;
      ++at;
      if (depth == 0) break;
    }
    return at;
  }
  while (at < text.size() && text[at] != ',' && text[at] != '}' && text[at] != ']' &&
         !is_json_space(text[at])) {
    ++at;
  }
  return at;
}

// The text of the value of the last member of the JSON object `object_text` when that
// member's key is `key`; nullopt otherwise. `object_text` is a valid JSON object with no
// surrounding whitespace.
std::optional<std::string> raw_last_value(const std::string& object_text, const std::string& key) {
  size_t at = skip_json_space(object_text, 1);
  std::string last_key;
  size_t value_begin = 0;
  size_t value_end = 0;
  while (at < object_text.size() && object_text[at] == '"') {
    const size_t key_end = skip_json_string(object_text, at);
    last_key = object_text.substr(at, key_end - at);
    at = skip_json_space(object_text, key_end) + 1;  // past ':'
    value_begin = skip_json_space(object_text, at);
    value_end = skip_json_value(object_text, value_begin);
    at = skip_json_space(object_text, value_end);
    if (at < object_text.size() && object_text[at] == ',')
      at = skip_json_space(object_text, at + 1);
  }
  // The key may be written with escapes ("argument\u0073"): compare its decoded text.
  if (last_key.empty() || nlohmann::json::parse(last_key).get<std::string>() != key) {
    return std::nullopt;
  }
  return object_text.substr(value_begin, value_end - value_begin);
}

// One call: a JSON object (surrounding whitespace allowed) with a string "name" and an object
// under `arguments_key` (Llama 3.1 also "arguments", which its models sometimes write).
std::optional<ToolCall> parse_call_object(const std::string& body,
                                          const std::string& arguments_key) {
  const std::string text = python_strip(body);
  const nlohmann::ordered_json call =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (call.is_discarded() || !call.is_object()) return std::nullopt;
  const auto name = call.find("name");
  std::string key = arguments_key;
  if (!call.contains(key) && key == "parameters") key = "arguments";
  const auto arguments = call.find(key);
  if (name == call.end() || !name->is_string()) return std::nullopt;
  if (arguments == call.end() || !arguments->is_object()) return std::nullopt;
  ToolCall result;
  result.name = name->get<std::string>();
  const std::optional<std::string> raw = raw_last_value(text, key);
  result.arguments = raw ? *raw : python_json_dumps(*arguments);
  return result;
}

// Llama 3.1: the whole completion is one call, optionally after <|python_tag|> (text before the
// tag is the message's content).
std::optional<ParsedToolCalls> parse_llama31_tool_call(const std::string& completion) {
  ParsedToolCalls parsed;
  std::string body = completion;
  if (const size_t tag = completion.find(kPythonTag); tag != std::string::npos) {
    parsed.content = python_strip(std::string_view(completion).substr(0, tag));
    body = completion.substr(tag + kPythonTag.size());
  }
  std::optional<ToolCall> call = parse_call_object(body, "parameters");
  if (!call) return std::nullopt;
  parsed.calls.push_back(std::move(*call));
  return parsed;
}

// The length of the longest end of `text` that is the start of `opening` (but not all of it).
size_t partial_opening_length(const std::string& text, const std::string& opening) {
  for (size_t length = std::min(opening.size() - 1, text.size()); length > 0; --length) {
    if (text.compare(text.size() - length, length, opening, 0, length) == 0) return length;
  }
  return 0;
}

}  // namespace

size_t tool_call_hold_from(const std::string& text, const ChatTemplate& chat_template) {
  if (!chat_template.supports_tools()) return std::string::npos;
  if (chat_template.style() == ChatTemplate::Style::kLlama31) {
    if (const size_t tag = text.find(kPythonTag); tag != std::string::npos) return tag;
    // A call is the whole completion: hold while only whitespace has come, or once it opens
    // with '{'.
    const std::string stripped = python_strip(text);
    if (stripped.empty() || stripped[0] == '{') return 0;
  } else if (const size_t open = text.find(kToolCallOpen); open != std::string::npos) {
    return open;
  }
  const std::string& opening =
      chat_template.style() == ChatTemplate::Style::kLlama31 ? kPythonTag : kToolCallOpen;
  const size_t partial = partial_opening_length(text, opening);
  return partial == 0 ? std::string::npos : text.size() - partial;
}

std::optional<ParsedToolCalls> parse_tool_calls(const std::string& completion,
                                                const ChatTemplate& chat_template) {
  if (!chat_template.supports_tools()) return std::nullopt;
  if (chat_template.style() == ChatTemplate::Style::kLlama31) {
    return parse_llama31_tool_call(completion);
  }
  size_t open = completion.find(kToolCallOpen);
  if (open == std::string::npos) return std::nullopt;
  ParsedToolCalls parsed;
  parsed.content = python_strip(std::string_view(completion).substr(0, open));
  // Text between blocks and after the last one is dropped, as SGLang's Hermes parser does.
  for (; open != std::string::npos; open = completion.find(kToolCallOpen, open)) {
    const size_t body = open + kToolCallOpen.size();
    const size_t close = completion.find(kToolCallClose, body);
    if (close == std::string::npos) return std::nullopt;
    std::optional<ToolCall> call =
        parse_call_object(completion.substr(body, close - body), "arguments");
    if (!call) return std::nullopt;
    parsed.calls.push_back(std::move(*call));
    open = close + kToolCallClose.size();
  }
  return parsed;
}

}  // namespace ooze::models
