// UTF-8 and Unicode helpers shared by the tokenizer and the chat templates. Text in ooze is
// a std::string of bytes that is usually, but not always, valid UTF-8 (a model can generate
// half a character); these helpers say exactly what happens to the invalid bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ooze {
namespace models {

// Decodes the UTF-8 character at text[pos]. On success sets *code_point and *length and
// returns true. On an ill-formed sequence returns false and sets *length to the length of its
// maximal subpart (Unicode's "substitution of maximal subparts", what Rust's from_utf8_lossy
// and the WHATWG decoder replace with one U+FFFD). Overlong forms, surrogates and code points
// above U+10FFFF are ill-formed.
bool decode_utf8(std::string_view text, size_t pos, char32_t* code_point, size_t* length);

// Appends the UTF-8 encoding of a valid scalar value.
void append_utf8(std::string& out, char32_t code_point);

bool is_valid_utf8(std::string_view text);

// `text` with every ill-formed subsequence replaced by U+FFFD, as Rust's from_utf8_lossy does.
std::string utf8_lossy(std::string_view text);

// Unicode NFC of `text`. Runs of valid UTF-8 are normalized; ill-formed bytes are kept as they
// are (they stay where they were, and text on either side of them is normalized separately).
std::string nfc_normalize(std::string_view text);

// The Unicode White_Space property (Rust's char::is_whitespace, regex \s).
bool is_unicode_whitespace(char32_t code_point);

// Python's str.isspace() for one character (what str.strip() removes): Unicode White_Space plus
// the separators U+001C..U+001F.
bool is_python_space(char32_t code_point);

// Python's str.strip() with no argument (Jinja's `trim`): `text` without the Python spaces at
// either end. Ill-formed bytes count as text and stop the stripping.
std::string python_strip(std::string_view text);

// A "word" character as Rust's regex crate defines \w: Alphabetic, marks, decimal digits,
// connector punctuation and join controls.
bool is_word_character(char32_t code_point);

}  // namespace models
}  // namespace ooze
