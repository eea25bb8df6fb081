// Byte-level BPE as Hugging Face's tokenizer.json describes it for the GPT-2 / Qwen2 / Qwen3 /
// Llama 3 family: a normalizer (none or NFC), pre-tokenizers that split the text (Split with a
// regex, ByteLevel with GPT-2's regex), the ByteLevel byte-to-unicode mapping, merges applied
// by rank, and a ByteLevel decoder that maps tokens back to the exact bytes.
//
// Added (special) tokens are not handled here: Tokenizer (tokenizer.h) finds them in the text
// first, as HF does, and hands the text between them to this class.
//
// Invalid UTF-8 is encoded losslessly: the normalizer leaves ill-formed bytes as they are, the
// split regex never matches them (PCRE2_MATCH_INVALID_UTF), so each run of them becomes a piece
// of its own, and byte-level BPE has a token for every byte. decode(encode(bytes)) == bytes for
// any bytes that NFC does not change.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ooze {
namespace models {

// GPT-2's byte-to-unicode table: the printable character that stands for `byte` in a
// byte-level vocabulary (printable ASCII and Latin-1 map to themselves, the rest to U+0100+).
char32_t byte_level_char(uint8_t byte);

// The text of a byte-level token for raw `bytes`, e.g. " hi" -> "Ġhi".
std::string byte_level_token(std::string_view bytes);

class BpeTokenizer {
 public:
  // Reads "normalizer", "pre_tokenizer", "model" and "decoder" of a parsed tokenizer.json.
  // `source` (the file) is named in errors. Throws FormatError for malformed or unsupported
  // content, naming the field.
  BpeTokenizer(const nlohmann::json& tokenizer_json, const std::string& source);
  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // The normalizer step alone (NFC or nothing). Tokenizer calls it between the two passes that
  // find added tokens, as HF does.
  std::string normalize(std::string_view text) const;
  // Pre-tokenizes already normalized text and appends the BPE ids of every piece to `ids`.
  void encode_normalized(std::string_view text, std::vector<int64_t>& ids) const;

  // The bytes a vocabulary token stands for; empty for an id outside the vocabulary.
  std::string_view token_bytes(int64_t id) const;
  // One more than the largest id of the model's vocabulary (added tokens not included).
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  std::optional<int64_t> token_to_id(const std::string& token) const;
  std::optional<std::string> id_to_token(int64_t id) const;

 private:
  struct SplitStep;
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };

  void parse_normalizer(const nlohmann::json& normalizer);
  void parse_pre_tokenizer(const nlohmann::json& pre_tokenizer);
  void parse_model(const nlohmann::json& model);
  void parse_decoder(const nlohmann::json& decoder);
  // BPE of one pre-tokenized piece (raw bytes), through the word cache.
  void encode_piece(std::string_view piece, std::vector<int64_t>& ids) const;
  std::vector<int64_t> merge_word(std::string_view piece) const;

  std::string source_;
  bool nfc_ = false;
  std::vector<SplitStep> splits_;                // the Split pre-tokenizers, in order
  bool add_prefix_space_ = false;                // ByteLevel's add_prefix_space
  std::unique_ptr<SplitStep> byte_level_split_;  // ByteLevel's GPT-2 regex (use_regex)

  std::unordered_map<std::string, int64_t> token_to_id_;
  std::vector<std::optional<std::string>> id_to_token_;
  std::vector<std::string> id_to_bytes_;
  int64_t byte_ids_[256];  // -1 where the vocabulary lacks the byte's character
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  std::optional<int64_t> unk_id_;
  bool ignore_merges_ = false;

  // Words seen before and their ids; encoding is dominated by repeated words.
  mutable std::unique_ptr<std::mutex> cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace models
}  // namespace ooze
