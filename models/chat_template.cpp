#include "models/chat_template.h"

#include <ctime>

#include "core/error.h"
#include "core/strings.h"
#include "models/python_json.h"
#include "models/tokenizer.h"
#include "models/unicode_utils.h"

namespace ooze {
namespace models {

namespace {

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

// Roles and tool data the style can render; the templates themselves skip what they do not
// know, which would hide a caller's mistake.
void check_messages(const std::vector<ChatMessage>& messages, ChatTemplate::Style style,
                    const ChatTools& tools) {
  const bool llama3 = style == ChatTemplate::Style::kLlama3;
  const std::string use_instead = "; use a chatml, qwen3 or llama3.1 model for tool calls";
  if (llama3 && !tools.empty()) {
    throw Error(
        "tools were given, but the llama3 chat template has no tool syntax (Llama 3 "
        "Instruct)" +
        use_instead);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    const std::string where = "chat message " + std::to_string(i);
    if (message.role == "tool" && llama3) {
      throw Error(where + " has role 'tool', but the llama3 chat template has no tool syntax" +
                  use_instead);
    }
    if (message.role != "system" && message.role != "user" && message.role != "assistant" &&
        message.role != "tool") {
      throw Error(where + " has role '" + message.role +
                  "'; ooze's chat templates support system, user, assistant and tool (tool "
                  "results; not with llama3)");
    }
    if (!message.tool_calls.empty()) {
      if (llama3) {
        throw Error(where + " has tool calls, but the llama3 chat template has no tool syntax" +
                    use_instead);
      }
      if (message.role != "assistant") {
        throw Error(where + " has role '" + message.role +
                    "' and tool calls; only assistant messages make tool calls");
      }
      if (style == ChatTemplate::Style::kLlama31 && message.tool_calls.size() > 1) {
        throw Error(where + " has " + std::to_string(message.tool_calls.size()) +
                    " tool calls; the llama3.1 chat template renders one call per assistant "
                    "message (Llama 3.1 calls one tool at a time)");
      }
    }
  }
}

// One call as both templates write it; the arguments text is what goes after "arguments": .
void append_tool_call(std::string& out, const std::string& name, const std::string& arguments) {
  out +=
      "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + arguments + "}\n</tool_call>";
}

// Qwen2.5 (chatml) and Llama 3.1 write arguments through `tojson`, and SGLang parses the OpenAI
// API's arguments string before rendering: the text is parsed (keeping its key order) and
// written again.
std::string tojson_tool_arguments(const ToolCall& call, size_t message, size_t index,
                                  const std::string& template_name) {
  nlohmann::ordered_json parsed;
  try {
    parsed = nlohmann::ordered_json::parse(call.arguments);
  } catch (const nlohmann::json::exception& e) {
    throw Error("chat message " + std::to_string(message) + ", tool call " + std::to_string(index) +
                " ('" + call.name + "'): arguments are not JSON (" + e.what() +
                "): " + abbreviated(call.arguments) + "; the " + template_name +
                " template writes them as a JSON value");
  }
  return python_json_dumps(parsed);
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

// The date a Llama 3.1-style template writes: today's local date when it asks for strftime_now
// (as Hugging Face's strftime_now does), else the literal it sets date_string to.
std::string llama31_date_string(const std::string& jinja) {
  if (contains(jinja, "strftime_now")) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char text[32];
    std::strftime(text, sizeof(text), "%d %b %Y", &local);
    return text;
  }
  const std::string set = "set date_string = \"";
  const size_t begin = jinja.find(set);
  const size_t end = begin == std::string::npos ? begin : jinja.find('"', begin + set.size());
  if (end == std::string::npos) return "26 Jul 2024";
  return jinja.substr(begin + set.size(), end - begin - set.size());
}

}  // namespace

ChatTemplate ChatTemplate::from_name(const std::string& name) {
  if (name == "chatml") return ChatTemplate(Style::kChatML, name);
  if (name == "qwen3") return ChatTemplate(Style::kQwen3, name);
  if (name == "llama3") return ChatTemplate(Style::kLlama3, name);
  if (name == "llama3.1") return ChatTemplate(Style::kLlama31, name);
  throw ConfigError("unknown chat template '" + name +
                    "'; choose chatml, qwen3, llama3 or llama3.1");
}

ChatTemplate ChatTemplate::detect(const std::string& jinja, const std::string& source,
                                  const std::string& bos_token) {
  const std::string hint = "; pick a built-in one by name (chatml, qwen3, llama3 or llama3.1)";
  if (jinja.empty()) throw FormatError(source + " has no chat_template" + hint);
  if (contains(jinja, "<|start_header_id|>") && contains(jinja, "<|end_header_id|>")) {
    const bool dated =
        contains(jinja, "Cutting Knowledge Date") || contains(jinja, "Environment: ipython");
    ChatTemplate result(dated ? Style::kLlama31 : Style::kLlama3, dated ? "llama3.1" : "llama3");
    if (!bos_token.empty()) result.bos_token_ = bos_token;
    if (!dated) return result;
    if (contains(jinja, "<|image|>")) {
      throw FormatError(source +
                        ": the chat_template is a Llama 3.2 Vision template (image turns), "
                        "which ooze does not render" +
                        hint);
    }
    if (!contains(jinja, "Cutting Knowledge Date: December 2023") ||
        !contains(jinja, "tools_in_user_message")) {
      throw FormatError(source +
                        ": the chat_template has a Llama 3.1-style system header but not Llama "
                        "3.1's date and tool lines, which ooze does not recognise" +
                        hint);
    }
    result.date_string_ = llama31_date_string(jinja);
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
  check_messages(messages, style_, tools);
  if (style_ == Style::kLlama3) return render_llama3(messages, add_generation_prompt);
  if (style_ == Style::kLlama31) return render_llama31(messages, add_generation_prompt, tools);
  return render_chatml(messages, add_generation_prompt, enable_thinking, tools);
}

std::string ChatTemplate::render_chatml(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt, bool enable_thinking,
                                        const ChatTools& tools) const {
  const bool qwen3 = style_ == Style::kQwen3;
  const int count = static_cast<int>(messages.size());
  std::string out;
  auto turn = [&](const std::string& role, const std::string& content) {
    out += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
  };

  // The first system message: inside the tools block when there are tools, else a turn (or
  // Qwen2.5's default one). Later system messages are ordinary turns.
  const bool first_is_system = count > 0 && messages[0].role == "system";
  if (!tools.empty()) {
    out += "<|im_start|>system\n";
    if (first_is_system) {
      out += messages[0].content + "\n\n";
    } else if (!qwen3 && !default_system_prompt_.empty()) {
      out += default_system_prompt_ + "\n\n";
    }
    out +=
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const nlohmann::ordered_json& tool : tools) out += "\n" + python_json_dumps(tool);
    out +=
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (first_is_system) {
    turn("system", messages[0].content);
  } else if (!qwen3 && !default_system_prompt_.empty()) {
    turn("system", default_system_prompt_);
  }

  // Qwen3: the last "query" is the last user message that is not a wrapped tool response; only
  // assistant turns after it keep their reasoning.
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
      if (i > 0 || message.role == "user") turn(message.role, message.content);
      continue;
    }
    if (message.role == "tool") {
      // Consecutive tool results share one user turn.
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + message.content + "\n</tool_response>";
      if (i == count - 1 || messages[i + 1].role != "tool") out += "<|im_end|>\n";
      continue;
    }
    if (!qwen3) {
      // Qwen2.5: calls follow the content on new lines; no newline after the role without content.
      if (message.tool_calls.empty()) {
        turn("assistant", message.content);
        continue;
      }
      out += "<|im_start|>assistant";
      if (!message.content.empty()) out += "\n" + message.content;
      for (size_t j = 0; j < message.tool_calls.size(); ++j) {
        const ToolCall& call = message.tool_calls[j];
        out += "\n";
        append_tool_call(out, call.name, tojson_tool_arguments(call, i, j, name_));
      }
      out += "<|im_end|>\n";
      continue;
    }
    // A Qwen3 assistant turn: split off the reasoning unless it came separately.
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
    // Arguments as the model wrote them. The newline before the first call depends on the
    // content before any newline trimming, as the template's `(loop.first and content)` does.
    for (size_t j = 0; j < message.tool_calls.size(); ++j) {
      if (j > 0 || !content.empty()) out += "\n";
      append_tool_call(out, message.tool_calls[j].name, message.tool_calls[j].arguments);
    }
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (qwen3 && !enable_thinking) out += "<think>\n\n</think>\n\n";
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

std::string ChatTemplate::render_llama31(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt, const ChatTools& tools) const {
  std::string out = bos_token_;
  auto turn = [&](const std::string& role, const std::string& content) {
    out += "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + content + "<|eot_id|>";
  };
  size_t next = 0;
  std::string system = tools.empty() ? "" : "Environment: ipython\n";
  system += "Cutting Knowledge Date: December 2023\nToday Date: " + date_string_ + "\n\n";
  if (!messages.empty() && messages[0].role == "system") {
    system += python_strip(messages[next++].content);
  }
  turn("system", system);

  // Custom tools travel in the first message after the system message, as a user turn.
  if (!tools.empty()) {
    if (next == messages.size()) {
      throw Error(
          "tools were given, but the conversation has no message after the system message; the "
          "llama3.1 chat template writes the tools into the first user message");
    }
    std::string user =
        "Given the following functions, please respond with a JSON for a function call with its "
        "proper arguments that best answers the given prompt.\n\nRespond in the format "
        "{\"name\": function name, \"parameters\": dictionary of argument name and its value}."
        "Do not use variables.\n\n";
    for (const nlohmann::ordered_json& tool : tools) user += python_json_dumps(tool, 4) + "\n\n";
    turn("user", user + python_strip(messages[next++].content));
  }

  for (size_t i = next; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if (message.role == "tool") {
      turn("ipython", python_json_dumps(message.content));
    } else if (!message.tool_calls.empty()) {
      const ToolCall& call = message.tool_calls[0];  // check_messages allows one
      turn("assistant", "{\"name\": \"" + call.name + "\", \"parameters\": " +
                            tojson_tool_arguments(call, i, 0, name_) + "}");
    } else {
      turn(message.role, python_strip(message.content));
    }
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
