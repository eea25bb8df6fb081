// The small tokenizer for toy tasks: a real Hugging Face tokenizer.json (byte-level BPE with no
// merges, so every byte is one token) plus the ChatML special tokens, and a
// tokenizer_config.json with eos/pad tokens and a ChatML chat template. Any HF-compatible tool
// can load it; ooze loads it with load_tokenizer().
//
//   ids 0..255   one per byte value (id == byte)
//   256          <|endoftext|>  (pad)
//   257          <|im_start|>
//   258          <|im_end|>     (eos)
//
// There is no normalizer and no splitting, so any bytes, valid UTF-8 or not, encode to their
// byte values and decode back exactly (except where they spell one of the three special
// tokens, which become that token's id).
#pragma once

#include <cstdint>
#include <string>

namespace ooze {
namespace models {

constexpr int64_t kByteLevelVocabSize = 259;

// Writes DIR/tokenizer.json and DIR/tokenizer_config.json (creating DIR if needed; existing
// files are replaced). Throws IoError when they cannot be written.
void write_byte_level_tokenizer(const std::string& dir);

}  // namespace models
}  // namespace ooze
