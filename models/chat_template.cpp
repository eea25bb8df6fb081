#include "models/chat_template.h"

#include "core/error.h"
#include "core/strings.h"
#include "models/tokenizer.h"
#include "models/unicode_utils.h"

namespace ooze {
namespace models {

namespace {

// Python's str.isspace(), which Jinja's `trim` filter (str.strip()) uses.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Jinja's `trim`: Python's str.strip() with no argument.
std::string python_strip(const std::string& text) {
  size_t begin = 0;
  size_t end = text.size();
  char32_t cp;
  size_t length;
  while (begin < end && decode_utf8(text, begin, &cp, &length) && is_python_space(cp)) {
    begin += length;
  }
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!decode_utf8(text, start, &cp, &length) || start + length != end || !is_python_space(cp)) {
      break;
    }
    end = start;
  }
  return text.substr(begin, end - begin);
}

std::string lstrip_newlines(const std::string& text) {
  const size_t begin = text.find_first_not_of('\n');
  return begin == std::string::npos ? "" : text.substr(begin);
}

std::string rstrip_newlines(const std::string& text) {
  const size_t last = text.find_last_not_of('\n');
  return last == std::string::npos ? "" : text.substr(0, last + 1);
}

std::string strip_newlines(const std::string& text) {
  return lstrip_newlines(rstrip_newlines(text));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void check_roles(const std::vector<ChatMessage>& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      throw Error("chat message " + std::to_string(i) + " has role '" + role +
                  "'; ooze's chat templates support system, user and assistant (tools are not "
                  "supported)");
    }
  }
}

// Undoes the escapes of a Jinja string literal (\n, \t, \\, \', \").
std::string unescape_jinja(const std::string& literal) {
  std::string out;
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal[i] == '\\' && i + 1 < literal.size()) {
      const char next = literal[++i];
      out += next == 'n' ? '\n' : next == 't' ? '\t' : next;
    } else {
      out += literal[i];
    }
  }
  return out;
}

// A ChatML template's default system message: the text of a literal
// '<|im_start|>system\n...<|im_end|>' that is not built from message content (Qwen2 and
// Qwen2.5 write one when the conversation has no system message).
std::string find_default_system_prompt(const std::string& jinja) {
  const std::string head = "<|im_start|>system";
  for (size_t at = jinja.find(head); at != std::string::npos; at = jinja.find(head, at + 1)) {
    size_t body = at + head.size();
    if (jinja.compare(body, 2, "\\n") == 0) {
      body += 2;
    } else if (jinja.compare(body, 1, "\n") == 0) {
      body += 1;
    } else {
      continue;
    }
    const size_t end = jinja.find("<|im_end|>", body);
    if (end == std::string::npos) continue;
    const std::string literal = jinja.substr(body, end - body);
    // A quote means the literal ends before <|im_end|>: the content is concatenated in.
    if (literal.empty() || literal.find_first_of("'\"{}") != std::string::npos) continue;
    return unescape_jinja(literal);
  }
  return "";
}

}  // namespace

ChatTemplate ChatTemplate::from_name(const std::string& name) {
  if (name == "chatml") return ChatTemplate(Style::kChatML, name);
  if (name == "qwen3") return ChatTemplate(Style::kQwen3, name);
  if (name == "llama3") return ChatTemplate(Style::kLlama3, name);
  throw ConfigError("unknown chat template '" + name + "'; choose chatml, qwen3 or llama3");
}

ChatTemplate ChatTemplate::detect(const std::string& jinja, const std::string& source,
                                  const std::string& bos_token) {
  const std::string hint = "; pick a built-in one by name (chatml, qwen3 or llama3)";
  if (jinja.empty()) throw FormatError(source + " has no chat_template" + hint);
  if (contains(jinja, "<|start_header_id|>") && contains(jinja, "<|end_header_id|>")) {
    if (contains(jinja, "Cutting Knowledge Date") || contains(jinja, "Environment: ipython")) {
      throw FormatError(source +
                        ": the chat_template is a Llama 3.1+ template (a system "
                        "header with date and tool lines), which ooze does not render" +
                        hint);
    }
    ChatTemplate result(Style::kLlama3, "llama3");
    if (!bos_token.empty()) result.bos_token_ = bos_token;
    return result;
  }
  if (contains(jinja, "<|im_start|>")) {
    if (contains(jinja, "reasoning_content") && contains(jinja, "last_query_index")) {
      return ChatTemplate(Style::kQwen3, "qwen3");
    }
    if (contains(jinja, "<think>") || contains(jinja, "</think>")) {
      throw FormatError(source +
                        ": the chat_template is a ChatML template with its own "
                        "<think> handling that ooze does not recognise" +
                        hint);
    }
    ChatTemplate result(Style::kChatML, "chatml");
    result.default_system_prompt_ = find_default_system_prompt(jinja);
    return result;
  }
  throw FormatError(source +
                    ": the chat_template is neither ChatML (<|im_start|>) nor Llama 3 "
                    "(<|start_header_id|>)" +
                    hint);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, bool enable_thinking,
                                 const ChatTools& tools) const {
  check_roles(messages);
  if (style_ == Style::kLlama3) return render_llama3(messages, add_generation_prompt);
  return render_chatml(messages, add_generation_prompt, enable_thinking, tools);
}

std::string ChatTemplate::render_chatml(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt, bool enable_thinking,
                                        const ChatTools& tools) const {
  (void)tools;  // TODO(tools)
  std::string out;
  auto turn = [&](const std::string& role, const std::string& content) {
    out += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
  };
  if (style_ == Style::kChatML) {
    if (!default_system_prompt_.empty() && (messages.empty() || messages[0].role != "system")) {
      turn("system", default_system_prompt_);
    }
    for (const ChatMessage& message : messages) turn(message.role, message.content);
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }

  // Qwen3. The last "query" is the last user message that is not a wrapped tool response;
  // only assistant turns after it keep their reasoning.
  const int count = static_cast<int>(messages.size());
  int last_query = count - 1;
  for (int i = count - 1; i >= 0; --i) {
    const std::string& content = messages[i].content;
    if (messages[i].role == "user" &&
        !(starts_with(content, "<tool_response>") && ends_with(content, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (int i = 0; i < count; ++i) {
    const ChatMessage& message = messages[i];
    if (message.role == "user" || message.role == "system") {
      turn(message.role, message.content);
      continue;
    }
    // An assistant turn: split off the reasoning unless it came separately.
    std::string content = message.content;
    std::string reasoning;
    if (message.reasoning_content) {
      reasoning = *message.reasoning_content;
    } else {
      const size_t close = content.find("</think>");
      if (close != std::string::npos) {
        const std::string before = rstrip_newlines(content.substr(0, close));
        const size_t open = before.rfind("<think>");
        reasoning = lstrip_newlines(open == std::string::npos ? before : before.substr(open + 7));
        content = lstrip_newlines(content.substr(content.rfind("</think>") + 8));
      }
    }
    out += "<|im_start|>assistant\n";
    if (i > last_query && (i == count - 1 || !reasoning.empty())) {
      out += "<think>\n" + strip_newlines(reasoning) + "\n</think>\n\n" + lstrip_newlines(content);
    } else {
      out += content;
    }
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (!enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

std::string ChatTemplate::render_llama3(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) const {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) out += bos_token_;
    out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" +
           python_strip(messages[i].content) + "<|eot_id|>";
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

ChatTemplate select_chat_template(const Tokenizer& tokenizer, const std::string& name) {
  if (!name.empty()) return ChatTemplate::from_name(name);
  return ChatTemplate::detect(tokenizer.chat_template(),
                              tokenizer.source() + "/tokenizer_config.json",
                              tokenizer.bos_token().value_or(""));
}

}  // namespace models
}  // namespace ooze
