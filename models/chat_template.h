// Chat templates, built in rather than interpreted from Jinja: the renderings of the templates
// ooze's model families ship, equal to the template's own output for ordinary conversations.
//
//   "chatml"  <|im_start|>ROLE\nCONTENT<|im_end|>\n per message; the generation prompt is
//             <|im_start|>assistant\n. Optionally a default system message when the
//             conversation has none (Qwen2 and Qwen2.5 templates carry one).
//   "qwen3"   ChatML as Qwen3's template writes it: no default system message; assistant
//             messages before the last user query lose their <think>...</think> block; those
//             after it show the reasoning as <think>\nREASONING\n</think>\n\n (the last one
//             always, even when empty); enable_thinking = false adds an empty think block to
//             the generation prompt.
//   "llama3"  BOS, then <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> per message
//             with the content trimmed of surrounding whitespace (Llama 3 / 3-Instruct).
//
// Tools (the OpenAI API's `tools`, assistant `tool_calls` and role "tool" messages) render as
// the Qwen2.5 / Qwen3 templates (Hermes syntax) write them, for "chatml" and "qwen3":
//   - the tool definitions, one `tojson` line each inside <tools></tools>, in a system message
//     that starts with the conversation's own system message and a blank line (chatml: else the
//     default system message, as Qwen2.5 does; with neither it starts at "# Tools");
//   - an assistant's calls as <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call> after
//     its content. Qwen3 writes the arguments text as it is (the template writes a string
//     argument unchanged) and puts a newline before the first call only when the content is not
//     empty; chatml (Qwen2.5) parses the arguments and writes them through `tojson` (SGLang parses
//     the OpenAI API's arguments string before rendering), puts a newline before every call, and
//     writes no newline after the role when the content is empty;
//   - consecutive "tool" messages as one user turn of \n<tool_response>\nCONTENT\n</tool_response>
//     each; Qwen3 does not count a user message that is a wrapped tool response as a query.
// `tojson` is Python's json.dumps (", " and ": " separators, non-ASCII kept; models/python_json.h),
// with object keys in the order the JSON value holds them.
//
// Not supported: tools with "llama3" (Llama 3 Instruct has no tool syntax), multimodal content,
// documents, and Llama 3.1+ templates (their system header carries tool and date lines).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ooze {
namespace models {

class Tokenizer;

// One call an assistant message makes: the OpenAI API's tool_calls[i].function.
struct ToolCall {
  std::string name;
  // The arguments object as JSON text, as the model wrote it (the OpenAI API's
  // function.arguments string).
  std::string arguments;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  // Qwen3: the assistant's reasoning, when kept apart from `content`.
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls = {};  // an assistant's calls, in order
};

// The tool definitions of a conversation (the OpenAI API's `tools` list), each rendered with
// `tojson`: keys in the order the value holds them.
using ChatTools = std::vector<nlohmann::ordered_json>;

class ChatTemplate {
 public:
  enum class Style { kChatML, kQwen3, kLlama3 };

  // "chatml", "qwen3" or "llama3"; throws ConfigError for other names.
  static ChatTemplate from_name(const std::string& name);
  // Recognises a Jinja template (tokenizer_config.json's chat_template) as one of the styles.
  // `source` is named in errors; `bos_token` is what Llama 3 templates write first (its
  // "<|begin_of_text|>" when empty). Throws FormatError for templates it does not recognise.
  static ChatTemplate detect(const std::string& jinja, const std::string& source,
                             const std::string& bos_token = "");

  // Renders the conversation. Throws Error for a role other than system/user/assistant/tool,
  // for tool calls on a message that is not the assistant's, for tools, tool calls or tool
  // messages with "llama3", and (chatml) for tool-call arguments that are not JSON.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     bool enable_thinking = true, const ChatTools& tools = {}) const;
  // Whether the template renders tools (and so the model may answer with tool calls).
  bool supports_tools() const { return style_ != Style::kLlama3; }

  Style style() const { return style_; }
  const std::string& name() const { return name_; }
  // ChatML: written as the system message when the conversation has none; empty for none.
  const std::string& default_system_prompt() const { return default_system_prompt_; }

 private:
  ChatTemplate(Style style, std::string name) : style_(style), name_(std::move(name)) {}
  std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                            bool enable_thinking, const ChatTools& tools) const;
  std::string render_llama3(const std::vector<ChatMessage>& messages,
                            bool add_generation_prompt) const;

  Style style_;
  std::string name_;
  std::string default_system_prompt_;
  std::string bos_token_ = "<|begin_of_text|>";
};

// The template named `name`, or, when `name` is empty, the one detected from the tokenizer's
// tokenizer_config.json (FormatError if it has none or it is not recognised).
ChatTemplate select_chat_template(const Tokenizer& tokenizer, const std::string& name);

}  // namespace models
}  // namespace ooze
