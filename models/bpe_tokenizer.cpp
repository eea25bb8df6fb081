#include "models/bpe_tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/error.h"
#include "core/strings.h"
#include "models/unicode_utils.h"

namespace ooze {
namespace models {

using nlohmann::json;

namespace {

// GPT-2's pre-tokenizer regex, used by a ByteLevel pre-tokenizer with use_regex = true.
const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Pieces longer than this are merged every time instead of being cached: they are rare (long
// runs of spaces or symbols) and would fill the cache.
constexpr size_t kMaxCachedPieceBytes = 256;
constexpr size_t kMaxCacheEntries = 1 << 18;

// The byte-level characters are U+0021..U+0143; -1 marks characters that stand for no byte.
constexpr char32_t kByteLevelCharLimit = 0x144;

struct ByteLevelTables {
  char32_t byte_to_char[256];
  int16_t char_to_byte[kByteLevelCharLimit];
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables = [] {
    ByteLevelTables t;
    std::fill(std::begin(t.char_to_byte), std::end(t.char_to_byte), int16_t{-1});
    // Printable bytes stand for themselves; the other 68 take U+0100, U+0101, ... in byte order.
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      t.byte_to_char[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      t.char_to_byte[t.byte_to_char[b]] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return tables;
}

// The raw bytes a token of the vocabulary stands for, as HF's ByteLevel decoder computes them:
// every character mapped back to its byte, or the token's own UTF-8 when some character is not
// a byte-level character.
std::string token_to_bytes(const std::string& token) {
  const ByteLevelTables& tables = byte_level_tables();
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    char32_t cp;
    size_t length;
    if (!decode_utf8(token, pos, &cp, &length)) return token;
    if (cp >= kByteLevelCharLimit || tables.char_to_byte[cp] < 0) return token;
    bytes += static_cast<char>(tables.char_to_byte[cp]);
    pos += length;
  }
  return bytes;
}

std::string describe(const json& value) { return abbreviated(value.dump()); }

struct Pcre2CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};

std::string pcre2_message(int error_code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(error_code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

char32_t byte_level_char(uint8_t byte) { return byte_level_tables().byte_to_char[byte]; }

std::string byte_level_token(std::string_view bytes) {
  std::string token;
  for (char c : bytes) append_utf8(token, byte_level_char(static_cast<uint8_t>(c)));
  return token;
}

// One regex split of the pre-tokenizer. Only HF's "Isolated" (matches and the text between
// them both become pieces) and "Removed" (matches are dropped) behaviours are supported.
struct BpeTokenizer::SplitStep {
  std::shared_ptr<pcre2_code> regex;
  bool remove_matches = false;
  bool invert = false;

  // Appends the pieces of `text` to `out` (empty pieces are dropped, as in HF).
  void split(std::string_view text, pcre2_match_data* match_data,
             std::vector<std::string>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t previous_end = 0;  // end of the last match
    size_t offset = 0;
    auto emit = [&](size_t begin, size_t end, bool is_match) {
      if (begin == end) return;
      if (invert) is_match = !is_match;
      if (is_match && remove_matches) return;
      out.emplace_back(text.substr(begin, end - begin));
    };
    while (offset < text.size()) {
      const int rc = pcre2_match(regex.get(), subject, text.size(), offset, 0, match_data, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        throw Error("pre-tokenizer regex failed on a text of " + std::to_string(text.size()) +
                    " bytes: " + pcre2_message(rc));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
      const size_t begin = ovector[0];
      const size_t end = ovector[1];
      if (end == begin) {  // an empty match splits nothing; step over one character
        char32_t cp;
        size_t length;
        decode_utf8(text, begin, &cp, &length);
        offset = begin + length;
        continue;
      }
      emit(previous_end, begin, false);
      emit(begin, end, true);
      previous_end = offset = end;
    }
    emit(previous_end, text.size(), false);
  }
};

namespace {

std::shared_ptr<pcre2_code> compile_regex(const std::string& pattern, bool literal,
                                          const std::string& where) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // UCP makes \s, \w and \d Unicode-aware like Rust's onig/regex; MATCH_INVALID_UTF lets
  // ill-formed bytes through unmatched instead of failing the whole match.
  uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  options |= literal ? PCRE2_LITERAL : PCRE2_UCP;  // PCRE2 refuses UCP with LITERAL
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    throw FormatError(where + ": cannot compile the regex " + describe(pattern) + " at offset " +
                      std::to_string(error_offset) + ": " + pcre2_message(error_code));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if unavailable
  return std::shared_ptr<pcre2_code>(code, Pcre2CodeDeleter());
}

bool bool_field(const json& object, const char* key, bool default_value, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return default_value;
  if (!it->is_boolean()) {
    throw FormatError(where + "." + key + " must be true or false, got " + describe(*it));
  }
  return it->get<bool>();
}

std::string type_of(const json& object, const std::string& where) {
  if (!object.is_object()) throw FormatError(where + " must be an object, got " + describe(object));
  auto it = object.find("type");
  if (it == object.end() || !it->is_string()) {
    throw FormatError(where + " has no \"type\" string");
  }
  return it->get<std::string>();
}

const json& array_field(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_array()) {
    throw FormatError(where + "." + key + " must be an array");
  }
  return *it;
}

}  // namespace

BpeTokenizer::BpeTokenizer(const json& tokenizer_json, const std::string& source)
    : source_(source), cache_mutex_(std::make_unique<std::mutex>()) {
  if (!tokenizer_json.is_object()) {
    throw FormatError(source + ": the top level must be a JSON object");
  }
  auto field = [&](const char* key) -> const json& {
    static const json null_value;
    auto it = tokenizer_json.find(key);
    return it == tokenizer_json.end() ? null_value : *it;
  };
  parse_normalizer(field("normalizer"));
  parse_pre_tokenizer(field("pre_tokenizer"));
  parse_model(field("model"));
  parse_decoder(field("decoder"));
}

BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

void BpeTokenizer::parse_normalizer(const json& normalizer) {
  if (normalizer.is_null()) return;
  const std::string where = source_ + ": normalizer";
  const std::string type = type_of(normalizer, where);
  if (type == "NFC") {
    nfc_ = true;
  } else if (type == "Sequence") {
    for (const json& step : array_field(normalizer, "normalizers", where)) parse_normalizer(step);
  } else {
    throw FormatError(where + " of type \"" + type +
                      "\" is not supported (ooze supports NFC, a Sequence of NFC, or none)");
  }
}

void BpeTokenizer::parse_pre_tokenizer(const json& pre_tokenizer) {
  const std::string where = source_ + ": pre_tokenizer";
  if (pre_tokenizer.is_null()) {
    throw FormatError(where +
                      " is null; a byte-level BPE tokenizer needs a ByteLevel "
                      "pre-tokenizer (alone or last in a Sequence)");
  }
  std::vector<const json*> steps;
  if (type_of(pre_tokenizer, where) == "Sequence") {
    for (const json& step : array_field(pre_tokenizer, "pretokenizers", where)) {
      steps.push_back(&step);
    }
  } else {
    steps.push_back(&pre_tokenizer);
  }
  bool byte_level_seen = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& step = *steps[i];
    const std::string step_where = steps.size() == 1 && &step == &pre_tokenizer
                                       ? where
                                       : where + ".pretokenizers[" + std::to_string(i) + "]";
    const std::string type = type_of(step, step_where);
    if (byte_level_seen) {
      throw FormatError(step_where + " (" + type +
                        ") comes after ByteLevel; ooze supports ByteLevel only as the last "
                        "pre-tokenizer");
    }
    if (type == "Split") {
      SplitStep split;
      auto pattern = step.find("pattern");
      if (pattern == step.end() || !pattern->is_object()) {
        throw FormatError(step_where + ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
      }
      if (pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
        split.regex = compile_regex((*pattern)["Regex"].get<std::string>(), false,
                                    step_where + ".pattern.Regex");
      } else if (pattern->contains("String") && (*pattern)["String"].is_string()) {
        split.regex = compile_regex((*pattern)["String"].get<std::string>(), true,
                                    step_where + ".pattern.String");
      } else {
        throw FormatError(step_where + ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
      }
      auto behavior = step.find("behavior");
      const std::string behavior_name =
          behavior != step.end() && behavior->is_string() ? behavior->get<std::string>() : "";
      if (behavior_name == "Isolated") {
        split.remove_matches = false;
      } else if (behavior_name == "Removed") {
        split.remove_matches = true;
      } else {
        throw FormatError(step_where + ".behavior " +
                          (behavior == step.end() ? std::string("is missing")
                                                  : describe(*behavior) + " is not supported") +
                          " (ooze supports \"Isolated\" and \"Removed\")");
      }
      split.invert = bool_field(step, "invert", false, step_where);
      splits_.push_back(std::move(split));
    } else if (type == "ByteLevel") {
      byte_level_seen = true;
      // HF's defaults when the fields are absent.
      add_prefix_space_ = bool_field(step, "add_prefix_space", true, step_where);
      if (bool_field(step, "use_regex", true, step_where)) {
        SplitStep gpt2;
        gpt2.regex = compile_regex(kGpt2Pattern, false, "GPT-2 ByteLevel regex");
        byte_level_split_ = std::make_unique<SplitStep>(std::move(gpt2));
      }
    } else {
      throw FormatError(step_where + " of type \"" + type +
                        "\" is not supported (ooze supports Split and ByteLevel)");
    }
  }
  if (!byte_level_seen) {
    throw FormatError(where + " has no ByteLevel step; ooze supports byte-level BPE only");
  }
}

void BpeTokenizer::parse_model(const json& model) {
  const std::string where = source_ + ": model";
  if (!model.is_object()) throw FormatError(where + " must be an object");
  auto type = model.find("type");
  if (type != model.end() && *type != "BPE") {
    throw FormatError(where + ".type " + describe(*type) + " is not supported (ooze supports BPE)");
  }
  auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    throw FormatError(where + ".dropout " + describe(*dropout) +
                      " is not supported: BPE dropout makes encoding random; set it to null");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() &&
        !(it->is_string() && it->get<std::string>().empty())) {
      throw FormatError(where + "." + key + " " + describe(*it) +
                        " is not supported by byte-level BPE; expected null or \"\"");
    }
  }
  if (bool_field(model, "byte_fallback", false, where)) {
    throw FormatError(where +
                      ".byte_fallback = true (SentencePiece-style byte fallback) is not "
                      "supported; ooze supports byte-level BPE");
  }
  ignore_merges_ = bool_field(model, "ignore_merges", false, where);

  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    throw FormatError(where + ".vocab must be an object mapping tokens to ids");
  }
  int64_t max_id = -1;
  token_to_id_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0) {
      throw FormatError(where + ".vocab[" + describe(it.key()) +
                        "] must be a non-negative integer id, got " + describe(it.value()));
    }
    const int64_t id = it.value().get<int64_t>();
    token_to_id_[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  if (max_id >= (int64_t{1} << 31)) {
    throw FormatError(where + ".vocab has id " + std::to_string(max_id) + ", above 2^31");
  }
  id_to_token_.assign(max_id + 1, std::nullopt);
  id_to_bytes_.assign(max_id + 1, std::string());
  for (const auto& [token, id] : token_to_id_) {
    if (id_to_token_[id]) {
      throw FormatError(where + ".vocab gives id " + std::to_string(id) + " to both " +
                        describe(*id_to_token_[id]) + " and " + describe(token));
    }
    id_to_token_[id] = token;
    id_to_bytes_[id] = token_to_bytes(token);
  }
  for (int b = 0; b < 256; ++b) {
    std::string token;
    append_utf8(token, byte_level_char(static_cast<uint8_t>(b)));
    auto it = token_to_id_.find(token);
    byte_ids_[b] = it == token_to_id_.end() ? -1 : it->second;
  }

  auto unk = model.find("unk_token");
  if (unk != model.end() && !unk->is_null()) {
    if (!unk->is_string() || !token_to_id_.count(unk->get<std::string>())) {
      throw FormatError(where + ".unk_token " + describe(*unk) + " is not in model.vocab");
    }
    unk_id_ = token_to_id_[unk->get<std::string>()];
  }

  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    throw FormatError(where +
                      ".merges must be an array of \"left right\" strings or "
                      "[left, right] pairs");
  }
  merges_.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const json& merge = (*merges)[rank];
    const std::string merge_where = where + ".merges[" + std::to_string(rank) + "]";
    std::string left, right;
    if (merge.is_string()) {
      // The older format: "left right", split at the first space (tokens never hold a space).
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        throw FormatError(merge_where + " " + describe(merge) +
                          " must be two tokens separated by one space");
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get_ref<const std::string&>();
      right = merge[1].get_ref<const std::string&>();
    } else {
      throw FormatError(merge_where + " " + describe(merge) +
                        " must be a \"left right\" string or a [left, right] pair");
    }
    auto find = [&](const std::string& token) {
      auto it = token_to_id_.find(token);
      if (it == token_to_id_.end()) {
        throw FormatError(merge_where + " " + describe(merge) + ": token " + describe(token) +
                          " is not in model.vocab");
      }
      return it->second;
    };
    const int64_t left_id = find(left);
    const int64_t right_id = find(right);
    const int64_t merged_id = find(left + right);
    const uint64_t key = (static_cast<uint64_t>(left_id) << 32) | static_cast<uint64_t>(right_id);
    // A repeated pair takes its last rank, as in HF (and lenml), whose maps keep the last entry.
    merges_.insert_or_assign(key,
                             Merge{static_cast<int32_t>(rank), static_cast<int32_t>(merged_id)});
  }
}

void BpeTokenizer::parse_decoder(const json& decoder) {
  const std::string where = source_ + ": decoder";
  if (decoder.is_null()) {
    throw FormatError(where + " is null; a byte-level BPE tokenizer needs a ByteLevel decoder");
  }
  const std::string type = type_of(decoder, where);
  if (type != "ByteLevel") {
    throw FormatError(where + " of type \"" + type +
                      "\" is not supported (ooze supports ByteLevel)");
  }
}

std::string BpeTokenizer::normalize(std::string_view text) const {
  return nfc_ ? nfc_normalize(text) : std::string(text);
}

void BpeTokenizer::encode_normalized(std::string_view text, std::vector<int64_t>& ids) const {
  if (text.empty()) return;
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  auto apply = [&](const SplitStep& step) {
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match_data(
        pcre2_match_data_create_from_pattern(step.regex.get(), nullptr), pcre2_match_data_free);
    if (!match_data) throw Error("out of memory creating PCRE2 match data");
    next.clear();
    for (const std::string& piece : pieces) step.split(piece, match_data.get(), next);
    pieces.swap(next);
  };
  for (const SplitStep& step : splits_) apply(step);
  if (add_prefix_space_) {
    // HF's ByteLevel adds the space to every piece it receives, not only the first.
    for (std::string& piece : pieces) {
      if (piece.empty() || piece[0] != ' ') piece.insert(piece.begin(), ' ');
    }
  }
  if (byte_level_split_) apply(*byte_level_split_);
  for (const std::string& piece : pieces) encode_piece(piece, ids);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int64_t>& ids) const {
  if (ignore_merges_) {
    auto it = token_to_id_.find(byte_level_token(piece));
    if (it != token_to_id_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1) {  // single bytes are common (punctuation, digits) and need no merges
    const int64_t id = byte_ids_[static_cast<uint8_t>(piece[0])];
    if (id >= 0) {
      ids.push_back(id);
    } else if (unk_id_) {
      ids.push_back(*unk_id_);
    }
    return;
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  std::string key;
  if (cacheable) {
    key.assign(piece);
    std::lock_guard<std::mutex> lock(*cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int64_t> word = merge_word(piece);
  ids.insert(ids.end(), word.begin(), word.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(*cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::move(key), std::move(word));
  }
}

// Classic BPE over a doubly linked list of symbols: repeatedly merge the adjacent pair with the
// lowest rank, leftmost first (HF's order), until no pair has a merge. A heap keeps it
// O(n log n) for long pieces.
std::vector<int64_t> BpeTokenizer::merge_word(std::string_view piece) const {
  struct Symbol {
    int64_t id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) {
    int64_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) {
      // HF: a character missing from the vocabulary becomes unk_token, or is dropped without one.
      if (!unk_id_) continue;
      id = *unk_id_;
    }
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, index + 1, true});
  }
  if (symbols.empty()) return {};
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int position;  // index of the left symbol
    int64_t left_id;
    int64_t right_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push_pair = [&](int left) {
    if (left < 0) return;
    const int right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find((static_cast<uint64_t>(symbols[left].id) << 32) |
                           static_cast<uint64_t>(symbols[right].id));
    if (it != merges_.end()) {
      queue.push(Candidate{it->second.rank, left, symbols[left].id, symbols[right].id});
    }
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.position];
    // Skip candidates made stale by an earlier merge of either symbol.
    if (!left.alive || left.id != top.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != top.right_id) continue;
    const uint64_t key = (static_cast<uint64_t>(left.id) << 32) | static_cast<uint64_t>(right.id);
    left.id = merges_.at(key).merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.position;
    push_pair(left.prev);
    push_pair(top.position);
  }

  std::vector<int64_t> ids;
  for (int i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
  return ids;
}

std::string_view BpeTokenizer::token_bytes(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return id_to_bytes_[id];
}

std::optional<int64_t> BpeTokenizer::token_to_id(const std::string& token) const {
  auto it = token_to_id_.find(token);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> BpeTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return std::nullopt;
  return id_to_token_[id];
}

}  // namespace models
}  // namespace ooze
