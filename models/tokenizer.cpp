#include "models/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/strings.h"
#include "models/unicode_utils.h"

namespace ooze {
namespace models {

using nlohmann::json;

namespace {

// The character that ends text[0, end), or false if there is none or it is ill-formed.
bool char_before(std::string_view text, size_t end, char32_t* cp, size_t* length) {
  if (end == 0) return false;
  size_t begin = end - 1;
  while (begin > 0 && end - begin < 4 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) {
    --begin;
  }
  return decode_utf8(text, begin, cp, length) && begin + *length == end;
}

bool char_after(std::string_view text, size_t begin, char32_t* cp, size_t* length) {
  return begin < text.size() && decode_utf8(text, begin, cp, length);
}

// HF's lstrip: where the run of whitespace that ends at `end` begins.
size_t whitespace_start_before(std::string_view text, size_t end) {
  char32_t cp;
  size_t length;
  while (char_before(text, end, &cp, &length) && is_unicode_whitespace(cp)) end -= length;
  return end;
}

// HF's rstrip: where the run of whitespace that starts at `begin` ends.
size_t whitespace_end_after(std::string_view text, size_t begin) {
  char32_t cp;
  size_t length;
  while (char_after(text, begin, &cp, &length) && is_unicode_whitespace(cp)) begin += length;
  return begin;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open " + path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw IoError("cannot read " + path);
  return buffer.str();
}

json parse_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw FormatError(path + " is not valid JSON: " + e.what());
  }
}

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

}  // namespace

Tokenizer::Tokenizer(const json& tokenizer_json, const json& tokenizer_config,
                     const std::string& source_dir)
    : source_(source_dir), model_(tokenizer_json, source_dir + "/tokenizer.json") {
  parse_added_tokens(tokenizer_json, source_dir + "/tokenizer.json");
  build_matcher(raw_matcher_, false);
  build_matcher(normalized_matcher_, true);
  vocab_size_ = model_.vocab_size();
  for (const AddedToken& token : added_tokens_) vocab_size_ = std::max(vocab_size_, token.id + 1);
  parse_config(tokenizer_config, source_dir + "/tokenizer_config.json");
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::parse_added_tokens(const json& tokenizer_json, const std::string& file) {
  auto list = tokenizer_json.find("added_tokens");
  if (list == tokenizer_json.end() || list->is_null()) return;
  if (!list->is_array()) throw FormatError(file + ": added_tokens must be an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const json& entry = (*list)[i];
    const std::string where = file + ": added_tokens[" + std::to_string(i) + "]";
    if (!entry.is_object()) throw FormatError(where + " must be an object");
    AddedToken token;
    auto id = entry.find("id");
    if (id == entry.end() || !id->is_number_integer() || id->get<int64_t>() < 0) {
      throw FormatError(where + ".id must be a non-negative integer");
    }
    token.id = id->get<int64_t>();
    auto content = entry.find("content");
    if (content == entry.end() || !content->is_string() || content->get<std::string>().empty()) {
      throw FormatError(where + ".content must be a non-empty string");
    }
    token.content = content->get<std::string>();
    auto flag = [&](const char* key, bool default_value) {
      auto it = entry.find(key);
      if (it == entry.end() || it->is_null()) return default_value;
      if (!it->is_boolean()) throw FormatError(where + "." + key + " must be true or false");
      return it->get<bool>();
    };
    // HF's defaults for fields a file leaves out.
    token.single_word = flag("single_word", false);
    token.lstrip = flag("lstrip", false);
    token.rstrip = flag("rstrip", false);
    token.normalized = flag("normalized", true);
    token.special = flag("special", false);
    if (added_by_content_.count(token.content)) {
      throw FormatError(where + ": token " + abbreviated(json(token.content).dump()) +
                        " is listed twice");
    }
    if (added_by_id_.count(token.id)) {
      throw FormatError(where + ": id " + std::to_string(token.id) + " is used by " +
                        abbreviated(json(added_tokens_[added_by_id_[token.id]].content).dump()) +
                        " too");
    }
    added_by_content_[token.content] = added_tokens_.size();
    added_by_id_[token.id] = added_tokens_.size();
    added_tokens_.push_back(std::move(token));
  }
}

void Tokenizer::build_matcher(Matcher& matcher, bool normalized) {
  matcher.by_first_byte.assign(256, {});
  for (size_t i = 0; i < added_tokens_.size(); ++i) {
    const AddedToken& token = added_tokens_[i];
    if (token.normalized != normalized) continue;
    // A normalized token is looked for in normalized text, so it is normalized too.
    std::string pattern = normalized ? model_.normalize(token.content) : token.content;
    if (pattern.empty()) continue;
    matcher.by_first_byte[static_cast<unsigned char>(pattern[0])].push_back(
        matcher.patterns.size());
    matcher.patterns.push_back(std::move(pattern));
    matcher.token_index.push_back(i);
  }
  for (auto& candidates : matcher.by_first_byte) {
    std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
      return matcher.patterns[a].size() > matcher.patterns[b].size();
    });
  }
}

void Tokenizer::parse_config(const json& config, const std::string& file) {
  if (config.is_null()) return;
  if (!config.is_object()) throw FormatError(file + ": the top level must be a JSON object");
  // A special token is named by its text, or by an AddedToken object {"content": ...}.
  auto special = [&](const char* key) -> std::optional<int64_t> {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return std::nullopt;
    std::string content;
    if (it->is_string()) {
      content = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      content = (*it)["content"].get<std::string>();
    } else {
      throw FormatError(file + ": " + key + " must be a token string or {\"content\": ...}, got " +
                        abbreviated(it->dump()));
    }
    std::optional<int64_t> id = token_to_id(content);
    if (!id) {
      throw FormatError(file + ": " + key + " " + abbreviated(json(content).dump()) +
                        " is not a token of tokenizer.json");
    }
    return id;
  };
  eos_token_id_ = special("eos_token");
  pad_token_id_ = special("pad_token");
  bos_token_id_ = special("bos_token");

  auto chat_template = config.find("chat_template");
  if (chat_template == config.end() || chat_template->is_null()) return;
  if (chat_template->is_string()) {
    chat_template_ = chat_template->get<std::string>();
    return;
  }
  // Several named templates: [{"name": "default", "template": ...}, {"name": "tool_use", ...}].
  if (chat_template->is_array()) {
    for (const json& entry : *chat_template) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        chat_template_ = entry["template"].get<std::string>();
        return;
      }
    }
    throw FormatError(file +
                      ": chat_template is a list without a {\"name\": \"default\", "
                      "\"template\": ...} entry");
  }
  throw FormatError(file + ": chat_template must be a string or a list of named templates");
}

std::vector<Tokenizer::Segment> Tokenizer::find_added_tokens(std::string_view text,
                                                             const Matcher& matcher) const {
  std::vector<Segment> segments;
  size_t emitted = 0;  // end of the last segment
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& candidates = matcher.by_first_byte[static_cast<unsigned char>(text[pos])];
    const std::string* found = nullptr;
    size_t found_index = 0;
    for (size_t index : candidates) {  // longest first: the first hit is the longest match
      const std::string& pattern = matcher.patterns[index];
      if (text.compare(pos, pattern.size(), pattern) == 0) {
        found = &pattern;
        found_index = index;
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    const AddedToken& token = added_tokens_[matcher.token_index[found_index]];
    size_t start = pos;
    size_t stop = pos + found->size();
    pos = stop;  // like HF's non-overlapping search, a discarded match is not searched again
    char32_t cp;
    size_t length;
    if (token.single_word) {
      const bool word_before = char_before(text, start, &cp, &length) && is_word_character(cp);
      const bool word_after = char_after(text, stop, &cp, &length) && is_word_character(cp);
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(whitespace_start_before(text, start), emitted);
    if (token.rstrip) stop = whitespace_end_after(text, stop);
    if (emitted < start) segments.push_back(Segment{emitted, start, -1});
    segments.push_back(Segment{start, stop, token.id});
    emitted = pos = stop;
  }
  if (emitted < text.size()) segments.push_back(Segment{emitted, text.size(), -1});
  return segments;
}

void Tokenizer::encode_between_added(std::string_view text, std::vector<int64_t>& ids) const {
  const std::string normalized = model_.normalize(text);
  if (normalized_matcher_.empty()) {
    model_.encode_normalized(normalized, ids);
    return;
  }
  const std::string_view view(normalized);
  for (const Segment& segment : find_added_tokens(view, normalized_matcher_)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else {
      model_.encode_normalized(view.substr(segment.begin, segment.end - segment.begin), ids);
    }
  }
}

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (raw_matcher_.empty()) {
    encode_between_added(text, ids);
    return ids;
  }
  for (const Segment& segment : find_added_tokens(text, raw_matcher_)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else {
      encode_between_added(text.substr(segment.begin, segment.end - segment.begin), ids);
    }
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string text;
  text.reserve(ids.size() * 4);
  for (int64_t id : ids) {
    auto added = added_by_id_.find(id);
    if (added != added_by_id_.end()) {
      const AddedToken& token = added_tokens_[added->second];
      if (!(skip_special_tokens && token.special)) text += token.content;
    } else {
      text += model_.token_bytes(id);
    }
  }
  return text;
}

std::optional<int64_t> Tokenizer::token_to_id(const std::string& token) const {
  auto added = added_by_content_.find(token);
  if (added != added_by_content_.end()) return added_tokens_[added->second].id;
  return model_.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int64_t id) const {
  auto added = added_by_id_.find(id);
  if (added != added_by_id_.end()) return added_tokens_[added->second].content;
  return model_.id_to_token(id);
}

bool Tokenizer::is_special(int64_t id) const {
  auto added = added_by_id_.find(id);
  return added != added_by_id_.end() && added_tokens_[added->second].special;
}

std::optional<std::string> Tokenizer::bos_token() const {
  return bos_token_id_ ? id_to_token(*bos_token_id_) : std::nullopt;
}

std::optional<std::string> Tokenizer::eos_token() const {
  return eos_token_id_ ? id_to_token(*eos_token_id_) : std::nullopt;
}

Tokenizer load_tokenizer(const std::string& dir) {
  const std::string tokenizer_path = dir + "/tokenizer.json";
  if (!file_exists(tokenizer_path)) {
    throw IoError("no tokenizer.json in " + dir +
                  ": pass a Hugging Face model directory (with tokenizer.json and "
                  "tokenizer_config.json)");
  }
  const json tokenizer_json = parse_json_file(tokenizer_path);
  const std::string config_path = dir + "/tokenizer_config.json";
  const json config = file_exists(config_path) ? parse_json_file(config_path) : json::object();
  Tokenizer tokenizer(tokenizer_json, config, dir);
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (tokenizer.chat_template().empty() && file_exists(jinja_path)) {
    tokenizer.set_chat_template(read_text_file(jinja_path));
  }
  return tokenizer;
}

}  // namespace models
}  // namespace ooze
