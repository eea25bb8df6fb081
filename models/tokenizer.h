// The tokenizer ooze uses everywhere: a Hugging Face model directory's tokenizer.json (byte-level
// BPE, the Qwen2/Qwen3/Llama 3 family) together with the special tokens and chat template of its
// tokenizer_config.json.
//
// encode() follows HF's `tokenizer(text, add_special_tokens=False)`: added tokens (special or
// not) are found in the text first, honouring their lstrip/rstrip/single_word/normalized flags,
// and only the text between them goes through normalizer -> pre-tokenizer -> BPE. encode()
// never adds BOS/EOS itself (post-processor templates are not applied); chat templates write
// those tokens into the text, as HF's apply_chat_template does.
//
// decode() returns the exact bytes the ids stand for, which may be invalid UTF-8 when the ids
// cut a character in two (HF would replace those bytes with U+FFFD; call utf8_lossy() from
// models/unicode_utils.h for that). Ids that name no token decode to nothing, as in HF.
//
// A Tokenizer is safe to use from several threads at once.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "models/bpe_tokenizer.h"

namespace ooze {
namespace models {

// An entry of tokenizer.json's "added_tokens".
struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool single_word = false;  // match only where no word character touches either end
  bool lstrip = false;       // the token swallows the whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool normalized = true;    // matched in the normalized text rather than the raw text
  bool special = false;      // dropped by decode(ids, skip_special_tokens = true)
};

class Tokenizer {
 public:
  // `tokenizer_json` and `tokenizer_config` are the parsed files (the config may be an empty
  // object); `source_dir` is named in errors. Throws FormatError naming the file and field.
  Tokenizer(const nlohmann::json& tokenizer_json, const nlohmann::json& tokenizer_config,
            const std::string& source_dir);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int64_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  // One more than the largest id of any token (model vocabulary and added tokens): the
  // smallest embedding that can hold every id.
  int64_t vocab_size() const { return vocab_size_; }
  // Token strings are as tokenizer.json writes them (byte-level form, "Ġhello"; added tokens
  // verbatim).
  std::optional<int64_t> token_to_id(const std::string& token) const;
  std::optional<std::string> id_to_token(int64_t id) const;
  bool is_special(int64_t id) const;
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }

  // From tokenizer_config.json; absent when the config does not name the token.
  std::optional<int64_t> eos_token_id() const { return eos_token_id_; }
  std::optional<int64_t> pad_token_id() const { return pad_token_id_; }
  std::optional<int64_t> bos_token_id() const { return bos_token_id_; }
  std::optional<std::string> bos_token() const;
  std::optional<std::string> eos_token() const;
  // The Jinja chat template text (tokenizer_config.json's chat_template, or the directory's
  // chat_template.jinja); empty if there is none. chat_template.h interprets it.
  const std::string& chat_template() const { return chat_template_; }
  void set_chat_template(std::string text) { chat_template_ = std::move(text); }
  // The model directory (or description) the tokenizer was loaded from.
  const std::string& source() const { return source_; }

 private:
  // Added tokens to look for in one pass: HF matches non-normalized tokens in the raw text and
  // normalized ones in the normalized text.
  struct Matcher {
    std::vector<std::string> patterns;
    std::vector<size_t> token_index;                 // into added_tokens_, per pattern
    std::vector<std::vector<size_t>> by_first_byte;  // pattern indices, longest first
    bool empty() const { return patterns.empty(); }
  };
  struct Segment {
    size_t begin;
    size_t end;
    int64_t id;  // -1 for text between added tokens
  };

  void parse_added_tokens(const nlohmann::json& tokenizer_json, const std::string& file);
  void parse_config(const nlohmann::json& config, const std::string& file);
  void build_matcher(Matcher& matcher, bool normalized);
  std::vector<Segment> find_added_tokens(std::string_view text, const Matcher& matcher) const;
  void encode_between_added(std::string_view text, std::vector<int64_t>& ids) const;

  std::string source_;
  BpeTokenizer model_;
  std::vector<AddedToken> added_tokens_;
  std::unordered_map<std::string, size_t> added_by_content_;
  std::unordered_map<int64_t, size_t> added_by_id_;
  Matcher raw_matcher_;
  Matcher normalized_matcher_;
  int64_t vocab_size_ = 0;
  std::optional<int64_t> eos_token_id_;
  std::optional<int64_t> pad_token_id_;
  std::optional<int64_t> bos_token_id_;
  std::string chat_template_;
};

// Loads DIR/tokenizer.json and DIR/tokenizer_config.json (optional: without it there are no
// special ids and no chat template); DIR/chat_template.jinja supplies the template when the
// config has none. Throws IoError when tokenizer.json cannot be read, FormatError when a file
// is malformed or unsupported.
Tokenizer load_tokenizer(const std::string& dir);

}  // namespace models
}  // namespace ooze
