// Text primitives the reward rules share: ASCII case and whitespace (Python's Unicode str.lower
// and str.split are in python_unicode.h), replace-all, UTF-8 code point boundaries, and Python's
// float() syntax.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace ooze::rollout {

// Python's str.isspace restricted to ASCII: space, \t, \n, \v, \f, \r.
bool is_ascii_space(char c);
bool is_ascii_digit(char c);
bool is_ascii_letter(char c);

std::string trim_ascii(const std::string& text);
std::string to_lower_ascii(std::string text);
std::string to_upper_ascii(std::string text);
bool contains(const std::string& text, const std::string& part);
bool starts_with(const std::string& text, const std::string& prefix);
bool ends_with(const std::string& text, const std::string& suffix);

// Every non-overlapping occurrence of `from` (non-empty), left to right, replaced by `to`.
std::string replace_all(const std::string& text, const std::string& from, const std::string& to);

// Bytes of the UTF-8 sequence that starts at text[pos]: 1 for ASCII or a malformed byte, never
// past the end of `text`.
size_t utf8_sequence_length(const std::string& text, size_t pos);

// Code points in `text` (Python's len); a malformed byte counts as one.
size_t code_point_count(const std::string& text);

// The last `count` code points of `text` (Python's text[-count:]).
std::string last_code_points(const std::string& text, size_t count);

// Python's float(text): surrounding whitespace, a sign, digits with an optional point and
// exponent, or inf / infinity / nan in any case. nullopt when Python would raise. As in Python,
// digits are any Unicode decimal digits (float("４٢") == 42.0) and non-ASCII whitespace
// (U+00A0, U+3000, ...) counts as whitespace.
std::optional<double> parse_python_float(const std::string& text);

// Python's str(int(value)) for a finite, integral double: its exact decimal digits, "0" for -0.
std::string integer_text(double value);

}  // namespace ooze::rollout
