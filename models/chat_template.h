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
//   "llama3.1" Llama 3.1, 3.2 and 3.3 Instruct: as "llama3", but the first turn is always a
//             system turn of "Cutting Knowledge Date: December 2023\nToday Date: DATE\n\n"
//             followed by the conversation's own system message (trimmed). DATE is the literal
//             the template sets ("26 Jul 2024" for 3.1 and 3.3); templates that ask for
//             strftime_now (3.2) get the local date the template was loaded, "%d %b %Y", fixed
//             from then on so that a run's prompts do not change at midnight.
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
// Tools render for "llama3.1" as its template writes custom tools (tools_in_user_message):
//   - "Environment: ipython\n" opens the system turn;
//   - the first message after the system message (whatever its role) becomes a user turn of the
//     tool instructions, each definition as `tojson(indent=4)` and a blank line, then that
//     message's content, trimmed; a conversation with no such message is an error;
//   - an assistant's call as {"name": NAME, "parameters": ARGS} with the arguments parsed and
//     written through `tojson` (as chatml), the message's content dropped; one call per message,
//     as the template refuses more;
//   - a "tool" message as an ipython turn whose content is the result text written through
//     `tojson` (the template's `is iterable` holds for strings), quotes included.
//
// Not supported: tools with "llama3" (Llama 3 Instruct has no tool syntax), Llama 3.1's built-in
// tools (brave_search, wolfram_alpha, code_interpreter: a caller-defined `builtin_tools`) and
// tools in the system message (`tools_in_user_message` false), Llama 3.2 Vision templates,
// multimodal content and documents.
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
  enum class Style { kChatML, kQwen3, kLlama3, kLlama31 };

  // "chatml", "qwen3", "llama3" or "llama3.1" (dated 26 Jul 2024, as Llama 3.1's template);
  // throws ConfigError for other names.
  static ChatTemplate from_name(const std::string& name);
  // Recognises a Jinja template (tokenizer_config.json's chat_template) as one of the styles.
  // `source` is named in errors; `bos_token` is what Llama 3 templates write first (its
  // "<|begin_of_text|>" when empty). Throws FormatError for templates it does not recognise.
  // A template that asks for strftime_now gets today's local date (see "llama3.1" above).
  static ChatTemplate detect(const std::string& jinja, const std::string& source,
                             const std::string& bos_token = "");

  // Renders the conversation. Throws Error for a role other than system/user/assistant/tool,
  // for tool calls on a message that is not the assistant's, for tools, tool calls or tool
  // messages with "llama3", (chatml, llama3.1) for tool-call arguments that are not JSON, and
  // (llama3.1) for more than one call in a message or tools without a first message to carry them.
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
  std::string render_llama31(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                             const ChatTools& tools) const;

  Style style_;
  std::string name_;
  std::string default_system_prompt_;
  std::string bos_token_ = "<|begin_of_text|>";
  std::string date_string_ = "26 Jul 2024";  // llama3.1: the system turn's "Today Date"
};

// The template named `name`, or, when `name` is empty, the one detected from the tokenizer's
// tokenizer_config.json (FormatError if it has none or it is not recognised).
ChatTemplate select_chat_template(const Tokenizer& tokenizer, const std::string& name);

}  // namespace models
}  // namespace ooze
