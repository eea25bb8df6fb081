// The tool calls in a completion, in the syntax the model's chat template teaches
// (models/chat_template.h). What the OpenAI API's tool_calls and content of the assistant
// message become.
//   "chatml", "qwen3" (Qwen2.5, Qwen3, Hermes): optional content, then one or more
//       <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call> blocks.
//   "llama3.1": the whole completion is one {"name": NAME, "parameters": {...}} object
//       ("arguments" accepted for "parameters"), optionally after <|python_tag|>, with content
//       only before the tag. One call, as the template renders one per message: a completion of
//       several calls (Llama's "; "-separated form) stays content.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/chat_template.h"

namespace ooze::models {

struct ParsedToolCalls {
  std::string content;          // the text before the first call, surrounding whitespace trimmed
  std::vector<ToolCall> calls;  // in order; each call's arguments as the model wrote them
};

// The calls in `completion`, or nullopt when it has none or any block is malformed (not JSON,
// not an object with a string "name" and an object "arguments", an unclosed block): the
// completion is then plain content. Byte-exact where it can be: a call's `arguments` is the
// model's own text of the arguments object when "arguments" is the object's last key (the
// templates write it last), else the object written as `tojson` would. Whitespace around the
// object inside a block is allowed; `content` is trimmed as Python's str.strip() trims.
// Text between the blocks and after the last one is dropped, as SGLang's Hermes/Qwen parser
// drops it. Always nullopt for "llama3", which has no tool syntax.
std::optional<ParsedToolCalls> parse_tool_calls(const std::string& completion,
                                                const ChatTemplate& chat_template);

// For streaming: the offset in `text` (a completion so far) from which it may be a tool call,
// to be held back until the completion ends and parse_tool_calls decides; npos when no call
// can have begun. Covers an opening cut short at the end ("<tool_c") and, for "llama3.1", a
// completion that is only whitespace so far or opens with '{' (held from 0).
size_t tool_call_hold_from(const std::string& text, const ChatTemplate& chat_template);

}  // namespace ooze::models
