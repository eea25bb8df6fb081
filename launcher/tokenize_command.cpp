#include "launcher/tokenize_command.h"

#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "launcher/commands.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "models/unicode_utils.h"

namespace ooze {
namespace launcher {

namespace {

using nlohmann::json;

struct Options {
  std::string tokenizer_dir;
  bool use_chat_template = false;
  std::string chat_template_name;  // empty: the tokenizer's own template
  bool add_generation_prompt = false;
  bool enable_thinking = true;
  bool decode = false;
  bool skip_special_tokens = false;
};

// What --chat-template alone means: the template of the tokenizer's directory.
const char* const kOwnTemplate = "auto";

ConfigSchema build_tokenize_schema() {
  ConfigSchema schema;
  schema.section("tokenize");
  schema.add_string("tokenizer", "", "Model directory whose tokenizer to use.").required();
  schema
      .add_string("chat_template", "",
                  "Render {\"messages\"} lines with this chat template: chatml, qwen3, llama3, "
                  "llama3.1, or auto (alone too): the template of the tokenizer's directory; "
                  "empty: plain {\"text\"} lines only.")
      .bare_value(kOwnTemplate);
  schema.add_bool("add_generation_prompt", false,
                  "End a rendered conversation with the assistant's turn header.");
  schema.add_bool("thinking", true,
                  "Let the template open a thinking block (--no-thinking: Qwen3's "
                  "enable_thinking=False).");
  schema.add_bool("decode", false, "Turn {\"ids\"} lines back into {\"text\"}.");
  schema.add_bool("skip_special_tokens", false, "With --decode: leave special tokens out.");
  schema.add_check("decode_or_template", [](const Config& c) -> std::string {
    if (c.get<bool>("decode") && !c.get<std::string>("chat_template").empty()) {
      return "--decode and --chat-template cannot be combined";
    }
    return "";
  });
  return schema;
}

Options read_tokenize_options(const Config& config) {
  Options options;
  options.tokenizer_dir = config.get<std::string>("tokenizer");
  const std::string chat_template = config.get<std::string>("chat_template");
  options.use_chat_template = !chat_template.empty();
  options.chat_template_name = chat_template == kOwnTemplate ? "" : chat_template;
  options.add_generation_prompt = config.get<bool>("add_generation_prompt");
  options.enable_thinking = config.get<bool>("thinking");
  options.decode = config.get<bool>("decode");
  options.skip_special_tokens = config.get<bool>("skip_special_tokens");
  return options;
}

std::vector<models::ChatMessage> parse_messages(const json& messages) {
  if (!messages.is_array()) throw Error("\"messages\" must be an array");
  std::vector<models::ChatMessage> result;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& message = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) throw Error(where + " must be an object");
    models::ChatMessage parsed;
    for (const char* key : {"role", "content"}) {
      if (!message.contains(key) || !message[key].is_string()) {
        throw Error(where + "." + key + " must be a string");
      }
    }
    parsed.role = message["role"].get<std::string>();
    parsed.content = message["content"].get<std::string>();
    if (message.contains("reasoning_content") && !message["reasoning_content"].is_null()) {
      if (!message["reasoning_content"].is_string()) {
        throw Error(where + ".reasoning_content must be a string");
      }
      parsed.reasoning_content = message["reasoning_content"].get<std::string>();
    }
    result.push_back(std::move(parsed));
  }
  return result;
}

// The output line for one input line; throws Error when the line cannot be processed.
std::string process_line(const std::string& line, const Options& options,
                         const models::Tokenizer& tokenizer,
                         const std::optional<models::ChatTemplate>& chat_template) {
  json input;
  try {
    input = json::parse(line);
  } catch (const json::parse_error& e) {
    throw Error(std::string("not valid JSON: ") + e.what());
  }
  if (!input.is_object()) throw Error("expected a JSON object");

  if (options.decode) {
    if (!input.contains("ids") || !input["ids"].is_array()) {
      throw Error("expected {\"ids\": [...]} (--decode)");
    }
    std::vector<int64_t> ids;
    for (const json& id : input["ids"]) {
      if (!id.is_number_integer()) throw Error("ids must be integers, got " + id.dump());
      const int64_t value = id.get<int64_t>();
      if (value < 0 || value >= tokenizer.vocab_size()) {
        throw Error("id " + id.dump() + " is outside the vocabulary [0, " +
                    std::to_string(tokenizer.vocab_size()) + ")");
      }
      ids.push_back(value);
    }
    const std::string text = tokenizer.decode(ids, options.skip_special_tokens);
    return json{{"text", models::utf8_lossy(text)}}.dump();
  }

  std::string text;
  if (input.contains("messages")) {
    if (!chat_template) throw Error("\"messages\" needs --chat-template");
    text = chat_template->render(parse_messages(input["messages"]), options.add_generation_prompt,
                                 options.enable_thinking);
  } else if (input.contains("text") && input["text"].is_string()) {
    text = input["text"].get<std::string>();
  } else {
    throw Error(chat_template ? "expected {\"text\": \"...\"} or {\"messages\": [...]}"
                              : "expected {\"text\": \"...\"}");
  }
  return json{{"ids", tokenizer.encode(text)}}.dump();
}

}  // namespace

const ConfigSchema& tokenize_schema() {
  static const ConfigSchema schema = build_tokenize_schema();
  return schema;
}

int run_tokenize_command(const std::vector<std::string>& args) {
  const std::optional<Config> config = load_config_from_command_line(tokenize_schema(), args);
  if (!config) {
    std::cout << command_help("tokenize");
    return 0;
  }
  const Options options = read_tokenize_options(*config);
  const models::Tokenizer tokenizer = models::load_tokenizer(options.tokenizer_dir);
  std::optional<models::ChatTemplate> chat_template;
  if (options.use_chat_template) {
    chat_template = models::select_chat_template(tokenizer, options.chat_template_name);
  }

  int failed_lines = 0;
  std::string line;
  for (int64_t line_number = 1; std::getline(std::cin, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      std::cout << std::endl;
      continue;
    }
    try {
      std::cout << process_line(line, options, tokenizer, chat_template) << std::endl;
    } catch (const std::exception& e) {  // ooze::Error, or nlohmann's for odd JSON
      ++failed_lines;
      const std::string message = "line " + std::to_string(line_number) + ": " + e.what();
      std::cout << json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace)
                << std::endl;
      std::cerr << "ooze tokenize: " << message << std::endl;
    }
  }
  return failed_lines == 0 ? 0 : 1;
}

}  // namespace launcher
}  // namespace ooze
