// The tool calls in a completion, in the syntax the model's chat template teaches
// (models/chat_template.h): for "chatml" and "qwen3" (Qwen2.5, Qwen3, Hermes),
//   optional content, then one or more <tool_call>\n{"name": NAME, "arguments":
//   {...}}\n</tool_call>
// blocks. What the OpenAI API's tool_calls and content of the assistant message become.
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

}  // namespace ooze::models
