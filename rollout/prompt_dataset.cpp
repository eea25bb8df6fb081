#include "rollout/prompt_dataset.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "core/checksum.h"
#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"

namespace ooze::rollout {
namespace {

using nlohmann::json;

// At most this many bad lines are spelled out in the error; the rest are counted.
constexpr size_t kReportedBadLines = 5;
// The longest prompt line read: 16 MiB of text is millions of tokens.
constexpr size_t kMaxLineBytes = size_t{16} << 20;

// A problem with one line, caught per line so every line is checked.
struct LineProblem {
  std::string message;
};

// One non-blank line of the file.
struct Record {
  int64_t line = 0;
  std::string text;
};

// Python's str.strip() set for ASCII, which is what Slime's reader strips.
bool is_blank(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
  });
}

std::string read_whole_file(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    throw IoError("prompt data " + path + " does not exist; check " + flag);
  }
  if (fs::is_directory(status)) {
    throw IoError("prompt data " + path + " is a directory; " + flag +
                  " must name a JSONL file (one JSON object per line)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw IoError("cannot open prompt data " + path + ": " + std::strerror(errno));
  }
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) throw IoError("cannot read prompt data " + path + ": " + std::strerror(errno));
  return content.str();
}

// "data.jsonl@[10:-5]" -> the file and Python slice bounds; no slice: the path as it is.
struct RowSlice {
  std::string file;
  bool sliced = false;
  std::optional<int64_t> start, end;
};

RowSlice parse_row_slice(const std::string& path) {
  static const std::regex pattern(R"(^(.*)@\[(-?\d*):(-?\d*)\]$)");
  std::smatch match;
  RowSlice slice;
  if (!std::regex_match(path, match, pattern)) {
    slice.file = path;
    return slice;
  }
  slice.file = match[1].str();
  slice.sliced = true;
  try {
    if (match[2].length() > 0) slice.start = std::stoll(match[2].str());
    if (match[3].length() > 0) slice.end = std::stoll(match[3].str());
  } catch (const std::out_of_range&) {
    throw ConfigError("prompt data " + path + ": the row slice's bounds are out of range");
  }
  return slice;
}

// Python's slice bound: negative counts from the end, then clamped to [0, size].
int64_t slice_bound(std::optional<int64_t> bound, int64_t fallback, int64_t size) {
  if (!bound) return fallback;
  int64_t value = *bound < 0 ? *bound + size : *bound;
  return std::clamp<int64_t>(value, 0, size);
}

std::string in_quotes(const std::string& key) { return "'" + key + "'"; }

std::string key_list(const json& object) {
  if (object.empty()) return "none (the object is empty)";
  std::string keys;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (!keys.empty()) keys += ", ";
    keys += it.key();
  }
  return keys;
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; users need the rest.
std::string parse_error_text(const json::parse_error& error) {
  std::string text = error.what();
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find("] ");
    if (close != std::string::npos) text = text.substr(close + 2);
  }
  return text;
}

const json& required_field(const json& object, const std::string& key, const std::string& flag) {
  auto it = object.find(key);
  if (it == object.end()) {
    throw LineProblem{"no key " + in_quotes(key) + " (" + flag +
                      "); the line has keys: " + key_list(object)};
  }
  return *it;
}

// What a line yields before rendering: either prompt text or chat messages.
struct ParsedLine {
  int64_t line = 0;
  std::optional<std::string> text;
  std::vector<models::ChatMessage> messages;
  std::string label;
  json metadata = json::object();
  json tools = nullptr;
};

std::vector<models::ChatMessage> parse_messages(const json& list, const std::string& key) {
  if (list.empty()) throw LineProblem{in_quotes(key) + " is an empty list of chat messages"};
  std::vector<models::ChatMessage> messages;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& message = list[i];
    const std::string where = in_quotes(key) + "[" + std::to_string(i) + "]";
    if (!message.is_object()) {
      throw LineProblem{where + " must be a chat message {\"role\": ..., \"content\": ...}, got " +
                        std::string(message.type_name())};
    }
    for (const char* field : {"role", "content"}) {
      auto it = message.find(field);
      if (it == message.end() || !it->is_string()) {
        throw LineProblem{
            where + "." + field + " must be a string, got " +
            (it == message.end() ? std::string("nothing") : std::string(it->type_name())) +
            (it != message.end() && it->is_array() ? " (multimodal content is not supported)"
                                                   : "")};
      }
    }
    models::ChatMessage parsed;
    parsed.role = message["role"].get<std::string>();
    parsed.content = message["content"].get<std::string>();
    if (parsed.role != "system" && parsed.role != "user" && parsed.role != "assistant") {
      throw LineProblem{where + " has role " + in_quotes(parsed.role) +
                        "; ooze's chat templates render system, user and assistant messages"};
    }
    auto reasoning = message.find("reasoning_content");
    if (reasoning != message.end() && !reasoning->is_null()) {
      if (!reasoning->is_string()) {
        throw LineProblem{where + ".reasoning_content must be a string, got " +
                          std::string(reasoning->type_name())};
      }
      parsed.reasoning_content = reasoning->get<std::string>();
    }
    messages.push_back(std::move(parsed));
  }
  return messages;
}

// A string that looks like a JSON object or array is parsed (datasets exported through pandas
// or Parquet often store nested values as JSON text); other strings are kept as they are.
json parse_if_json_text(const json& value, const std::string& key) {
  if (!value.is_string()) return value;
  const std::string& text = value.get_ref<const std::string&>();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || (text[first] != '{' && text[first] != '[')) return value;
  try {
    return json::parse(text);
  } catch (const json::parse_error& error) {
    throw LineProblem{in_quotes(key) + " is a string holding malformed JSON (" +
                      parse_error_text(error) + ")"};
  }
}

ParsedLine parse_line(const Record& record, const PromptDatasetOptions& options) {
  // Refused before parsing: a JSON parse and a tokenization of a line of hundreds of MiB would
  // take tens of GiB, for a prompt no model's context holds.
  if (record.text.size() > kMaxLineBytes) {
    throw LineProblem{"the line is " + std::to_string(record.text.size() >> 20) +
                      " MiB; a prompt line may hold at most " +
                      std::to_string(kMaxLineBytes >> 20) +
                      " MiB (millions of tokens, beyond any model's context)"};
  }
  json object;
  try {
    object = json::parse(record.text);
  } catch (const json::parse_error& error) {
    throw LineProblem{"not JSON (" + parse_error_text(error) + ")"};
  }
  if (!object.is_object()) {
    throw LineProblem{"a JSON " + std::string(object.type_name()) +
                      ", not an object; each line must be one JSON object such as {" +
                      json(options.input_key).dump() + ": \"...\"}"};
  }
  ParsedLine parsed;
  parsed.line = record.line;

  const json& input = required_field(object, options.input_key, options.flags.input_key);
  if (input.is_string()) {
    if (options.apply_chat_template) {
      // Slime's reading of a plain string under --apply-chat-template: one user turn.
      parsed.messages.push_back({"user", input.get<std::string>(), std::nullopt});
    } else {
      parsed.text = input.get<std::string>();
    }
  } else if (input.is_array()) {
    if (!options.apply_chat_template) {
      throw LineProblem{in_quotes(options.input_key) + " is a list (chat messages?); add " +
                        options.flags.apply_chat_template +
                        " to render it with the chat template, or give the prompt as a string"};
    }
    parsed.messages = parse_messages(input, options.input_key);
  } else {
    throw LineProblem{in_quotes(options.input_key) + " must be a string" +
                      (options.apply_chat_template
                           ? " or a list of chat messages"
                           : std::string(" (or, with ") + options.flags.apply_chat_template +
                                 ", a list of chat messages)") +
                      ", got " + std::string(input.type_name())};
  }

  if (!options.label_key.empty()) {
    const json& label = required_field(object, options.label_key, options.flags.label_key);
    if (label.is_string()) {
      parsed.label = label.get<std::string>();
    } else if (!label.is_null()) {
      parsed.label = label.dump();
    }
  }

  if (!options.metadata_key.empty()) {
    auto metadata = object.find(options.metadata_key);
    if (metadata != object.end() && !metadata->is_null() &&
        !(metadata->is_string() && metadata->get_ref<const std::string&>().empty())) {
      parsed.metadata = parse_if_json_text(*metadata, options.metadata_key);
    }
  }

  if (!options.tool_key.empty()) {
    auto tools = object.find(options.tool_key);
    if (tools != object.end() && !tools->is_null()) {
      json value = *tools;
      if (value.is_string()) {
        try {
          value = json::parse(value.get<std::string>());
        } catch (const json::parse_error& error) {
          throw LineProblem{in_quotes(options.tool_key) + " is a string that is not JSON (" +
                            parse_error_text(error) + "); it must hold a list of tools"};
        }
      }
      if (!value.is_array()) {
        throw LineProblem{in_quotes(options.tool_key) +
                          " must be a list of tool definitions (or a string holding one), got " +
                          std::string(value.type_name()) + " (" + options.flags.tool_key + ")"};
      }
      parsed.tools = value;
      // Slime's generate functions find the tools in the metadata.
      if (parsed.metadata.is_object()) parsed.metadata["tools"] = value;
    }
  }
  return parsed;
}

// Tokenizes every prompt; large datasets use a few threads (Tokenizer is thread-safe).
void tokenize_all(std::vector<Prompt>& prompts, const models::Tokenizer& tokenizer) {
  const size_t count = prompts.size();
  const size_t threads =
      count < 2048 ? 1 : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  if (threads == 1) {
    for (Prompt& prompt : prompts) prompt.tokens = tokenizer.encode(prompt.text);
    return;
  }
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (size_t i = t; i < count; i += threads) {
        prompts[i].tokens = tokenizer.encode(prompts[i].text);
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
}

std::string hex32(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", value);
  return text;
}

// Rethrows a chat-template selection error as the same type, saying which data needed it.
[[noreturn]] void rethrow_template_error(const std::string& where) {
  try {
    throw;
  } catch (const ConfigError& error) {
    throw ConfigError(where + ": " + error.what());
  } catch (const FormatError& error) {
    throw FormatError(where + ": " + error.what());
  }
}

}  // namespace

namespace {

// --apply-chat-template-kwargs: a JSON object; ooze's templates take enable_thinking only.
bool enable_thinking_of(const std::string& kwargs_text) {
  json kwargs;
  try {
    kwargs = json::parse(kwargs_text.empty() ? "{}" : kwargs_text);
  } catch (const json::parse_error& error) {
    throw ConfigError("apply_chat_template_kwargs = " + kwargs_text + " is not JSON (" +
                      parse_error_text(error) +
                      "); give an object such as '{\"enable_thinking\": false}'");
  }
  if (!kwargs.is_object()) {
    throw ConfigError("apply_chat_template_kwargs = " + kwargs_text +
                      " must be a JSON object such as '{\"enable_thinking\": false}'");
  }
  bool enable_thinking = true;
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    if (it.key() != "enable_thinking") {
      throw ConfigError("apply_chat_template_kwargs: '" + it.key() +
                        "' is not supported; ooze's chat templates take enable_thinking only");
    }
    if (!it.value().is_boolean()) {
      throw ConfigError("apply_chat_template_kwargs: enable_thinking must be true or false, got " +
                        it.value().dump());
    }
    enable_thinking = it.value().get<bool>();
  }
  return enable_thinking;
}

}  // namespace

const OptionFields<PromptDatasetOptions>& PromptDatasetOptions::fields() {
  using O = PromptDatasetOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("data");
    f.add("prompt_data", &O::path,
          "The prompt dataset: a JSONL file, one JSON object per line; FILE@[start:end] keeps "
          "those records.");
    f.add("input_key", &O::input_key,
          "Key of the prompt: a string, or a list of chat messages with --apply-chat-template.");
    f.add("label_key", &O::label_key, "Key of the label given to reward functions (\"\": none).");
    f.add("metadata_key", &O::metadata_key,
          "Key of the metadata object given to reward and generate functions.");
    f.add("tool_key", &O::tool_key,
          "Key of a prompt's tool list, read where a line has it (\"\": never).");
    f.add("apply_chat_template", &O::apply_chat_template,
          "Render each prompt with the chat template and its generation prompt.");
    f.add_custom(
        "apply_chat_template_kwargs", FieldType::kString,
        [](const O& o) {
          return nlohmann::json(o.enable_thinking ? "{}" : R"({"enable_thinking": false})");
        },
        [](const nlohmann::json& value, O& o) {
          o.enable_thinking = enable_thinking_of(value.get<std::string>());
        },
        "JSON object of chat template options: {\"enable_thinking\": false} (Qwen3).");
    f.add("chat_template", &O::chat_template,
          "Chat template: chatml, qwen3, llama3 or llama3.1; empty: the tokenizer's own.");
    f.add("rollout_max_prompt_len", &O::max_prompt_len,
          "Drop prompts of more tokens than this when loading the data (0: no limit).")
        .min(0);
    f.add_rule([](const O& options) {
      if (options.input_key.empty()) {
        throw ConfigError("input_key is empty: --input-key must name the prompt's key");
      }
      if (!options.chat_template.empty()) {
        models::ChatTemplate::from_name(options.chat_template);  // ConfigError for unknown names
      }
    });
    return f;
  }();
  return fields;
}

PromptDataset::PromptDataset(PromptDatasetOptions options, const models::Tokenizer& tokenizer)
    : options_(std::move(options)) {
  const PromptDatasetOptions& o = options_;
  if (o.path.empty()) {
    throw ConfigError("no prompt data: " + o.flags.path + " must name a JSONL file");
  }
  const RowSlice slice = parse_row_slice(o.path);
  const std::string& file = slice.file;
  if (file.size() >= 8 && file.compare(file.size() - 8, 8, ".parquet") == 0) {
    throw FormatError("prompt data " + file +
                      " is Parquet; ooze reads JSONL (one JSON object per line): convert it, "
                      "e.g. with pandas' to_json(path, orient='records', lines=True)");
  }

  // The chat template first: a wrong name should not wait for the whole file.
  std::optional<models::ChatTemplate> chat_template;
  if (o.apply_chat_template) {
    try {
      chat_template.emplace(models::select_chat_template(tokenizer, o.chat_template));
    } catch (const Error&) {
      rethrow_template_error("prompt data " + file + " (" + o.flags.apply_chat_template + ")");
    }
  }

  const std::string content = read_whole_file(file, o.flags.path);
  const uint32_t file_crc = crc32(content.data(), content.size());

  std::vector<Record> records;
  {
    size_t begin = 0;
    int64_t line = 0;
    while (begin < content.size()) {
      size_t end = content.find('\n', begin);
      if (end == std::string::npos) end = content.size();
      ++line;
      std::string text = content.substr(begin, end - begin);
      if (!is_blank(text)) records.push_back({line, std::move(text)});
      begin = end + 1;
    }
  }
  if (records.empty()) {
    throw FormatError("prompt data " + file + " has no prompts (" +
                      (content.empty() ? "the file is empty" : "every line is blank") + "); " +
                      o.flags.path + " must name a JSONL file with one JSON object per line");
  }
  if (slice.sliced) {
    const int64_t total = static_cast<int64_t>(records.size());
    const int64_t start = slice_bound(slice.start, 0, total);
    const int64_t end = std::max(start, slice_bound(slice.end, total, total));
    records = std::vector<Record>(records.begin() + start, records.begin() + end);
    if (records.empty()) {
      throw FormatError("prompt data " + o.path + ": the row slice keeps none of the file's " +
                        std::to_string(total) + " records");
    }
  }
  records_read_ = static_cast<int64_t>(records.size());
  if (const json first = records.front().text.size() <= kMaxLineBytes
                             ? json::parse(records.front().text, nullptr, false)
                             : json();
      first.is_object()) {
    for (auto it = first.begin(); it != first.end(); ++it) first_record_keys_.push_back(it.key());
  }

  // Every line is checked before any is used, so one run reports all that is wrong.
  std::vector<ParsedLine> parsed;
  parsed.reserve(records.size());
  std::vector<std::string> problems;
  int64_t bad_lines = 0;
  auto report = [&](int64_t line, const std::string& message) {
    ++bad_lines;
    if (problems.size() < kReportedBadLines) {
      problems.push_back(file + ":" + std::to_string(line) + ": " + message);
    }
  };
  for (const Record& record : records) {
    try {
      parsed.push_back(parse_line(record, o));
    } catch (const LineProblem& problem) {
      report(record.line, problem.message);
    }
  }

  prompts_.reserve(parsed.size());
  for (ParsedLine& line : parsed) {
    Prompt prompt;
    prompt.line = line.line;
    if (line.text) {
      prompt.text = std::move(*line.text);
    } else {
      try {
        prompt.text =
            chat_template->render(line.messages, /*add_generation_prompt=*/true, o.enable_thinking);
      } catch (const Error& error) {
        report(line.line, std::string("the chat template cannot render it: ") + error.what());
        continue;
      }
    }
    prompt.label = std::move(line.label);
    prompt.metadata = std::move(line.metadata);
    prompt.tools = std::move(line.tools);
    prompts_.push_back(std::move(prompt));
  }
  if (bad_lines > 0) {
    std::string message = "prompt data " + file + ": " + std::to_string(bad_lines) + " of " +
                          std::to_string(records.size()) + " lines cannot be used";
    message += bad_lines > static_cast<int64_t>(problems.size())
                   ? " (the first " + std::to_string(problems.size()) + " below)"
                   : "";
    message += "; fix or remove them:";
    for (const std::string& problem : problems) message += "\n  " + problem;
    throw FormatError(message);
  }

  tokenize_all(prompts_, tokenizer);

  if (o.max_prompt_len > 0) {
    size_t shortest = SIZE_MAX;
    for (const Prompt& prompt : prompts_) shortest = std::min(shortest, prompt.tokens.size());
    const size_t before = prompts_.size();
    prompts_.erase(std::remove_if(prompts_.begin(), prompts_.end(),
                                  [&](const Prompt& prompt) {
                                    return static_cast<int64_t>(prompt.tokens.size()) >
                                           o.max_prompt_len;
                                  }),
                   prompts_.end());
    dropped_too_long_ = static_cast<int64_t>(before - prompts_.size());
    if (prompts_.empty()) {
      throw FormatError("prompt data " + file + ": all " + std::to_string(before) +
                        " prompts are longer than " + o.flags.max_prompt_len + " = " +
                        std::to_string(o.max_prompt_len) + " tokens (the shortest has " +
                        std::to_string(shortest) + "); raise the limit");
    }
  }

  int64_t with_tools = 0;
  for (const Prompt& prompt : prompts_) with_tools += prompt.tools.is_null() ? 0 : 1;
  if (chat_template && with_tools > 0) {
    OOZE_LOG(WARN) << "prompt data " << file << ": " << with_tools << " prompts carry tools ("
                   << o.flags.tool_key << " " << in_quotes(o.tool_key)
                   << "), but ooze's chat templates do not write tool definitions into the "
                      "prompt; the tools stay on each sample (tools, metadata[\"tools\"]) for "
                      "generate functions";
  }

  const json prompt_options = {
      {"input_key", o.input_key},
      {"label_key", o.label_key},
      {"metadata_key", o.metadata_key},
      {"tool_key", o.tool_key},
      {"chat_template", chat_template ? chat_template->name() : ""},
      {"default_system_prompt", chat_template ? chat_template->default_system_prompt() : ""},
      {"enable_thinking", o.enable_thinking},
      {"max_prompt_len", o.max_prompt_len},
      {"slice", slice.sliced ? o.path.substr(file.size()) : ""}};
  const std::string options_text = prompt_options.dump();
  fingerprint_ = "file " + hex32(file_crc) + " (" + std::to_string(content.size()) +
                 " bytes), options " + hex32(crc32(options_text.data(), options_text.size())) +
                 ", " + std::to_string(prompts_.size()) + " prompts";

  OOZE_LOG(INFO) << "prompt data " << o.path << ": " << prompts_.size() << " prompts"
                 << (dropped_too_long_ > 0
                         ? " (" + std::to_string(dropped_too_long_) + " of " +
                               std::to_string(records_read_) + " dropped: longer than " +
                               o.flags.max_prompt_len + " = " + std::to_string(o.max_prompt_len) +
                               " tokens)"
                         : std::string());
}

const Prompt& PromptDataset::at(int64_t index) const {
  if (index < 0 || index >= size()) {
    throw std::out_of_range("prompt index " + std::to_string(index) + " outside [0, " +
                            std::to_string(size()) + ")");
  }
  return prompts_[static_cast<size_t>(index)];
}

}  // namespace ooze::rollout
