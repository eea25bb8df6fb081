// Python's Unicode rules for str, which the reward rules' Python originals apply to any text:
// str.isspace (what str.split() and float() skip), the digits int() and float() read,
// str.isdigit, the re module's \w (what \b sees), and str.lower(). Character properties come
// from ICU. Text is UTF-8; ill-formed bytes are none of these things and lower-casing keeps them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ooze::rollout {

// The code point of the UTF-8 sequence at text[pos] (pos < text.size()) and its length in
// bytes; -1 for an ill-formed sequence, with the length of its maximal subpart (at least 1).
struct CodePoint {
  int value;
  size_t length;
};
CodePoint code_point_at(const std::string& text, size_t pos);

// str.isspace: bidirectional class WS, B or S, or category Zs. Besides ASCII's space and
// \t\n\v\f\r this counts \x1c-\x1f, U+0085, no-break spaces (U+00A0, U+202F), U+2000-U+200A,
// the line and paragraph separators and the ideographic space U+3000.
bool is_python_space(int code_point);

// The value int() gives a decimal digit (category Nd: ASCII 0-9, fullwidth ４, Arabic-Indic ٤,
// Devanagari ४, ...), or -1. Superscripts (²) and numerals such as Ⅳ are not decimal digits.
int python_decimal_value(int code_point);

// str.isdigit: decimal digits and the other characters with a digit value (², ①).
bool is_python_digit(int code_point);

// The re module's \w on str: str.isalnum() (letters, and anything with a numeric value) or _.
// Combining marks are not word characters.
bool is_python_word(int code_point);

// str.isdigit() of the whole text: non-empty, and every character a digit.
bool is_python_digit_text(const std::string& text);

// str.split() without arguments: the runs between whitespace, none of them empty.
std::vector<std::string> python_split(const std::string& text);

// str.lower(): full lower-case mappings (İ -> i̇, two code points) and the final sigma
// (ΟΔΟΣ -> οδος). Ill-formed bytes stay as they are.
std::string python_lower(const std::string& text);

}  // namespace ooze::rollout
