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
// Not supported: tools and tool calls (role "tool", tool_calls), multimodal content, documents,
// and Llama 3.1+ templates (their system header carries tool and date lines).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ooze {
namespace models {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
  // Qwen3: the assistant's reasoning, when kept apart from `content`.
  std::optional<std::string> reasoning_content;
};

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

  // Renders the conversation. Throws Error for a role other than system/user/assistant.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     bool enable_thinking = true) const;

  Style style() const { return style_; }
  const std::string& name() const { return name_; }
  // ChatML: written as the system message when the conversation has none; empty for none.
  const std::string& default_system_prompt() const { return default_system_prompt_; }

 private:
  ChatTemplate(Style style, std::string name) : style_(style), name_(std::move(name)) {}
  std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                            bool enable_thinking) const;
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
