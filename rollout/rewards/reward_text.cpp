#include "rollout/rewards/reward_text.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "rollout/rewards/python_unicode.h"

namespace ooze::rollout {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }

bool is_ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string trim_ascii(const std::string& text) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && is_ascii_space(text[begin])) ++begin;
  while (end > begin && is_ascii_space(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

std::string to_lower_ascii(std::string text) {
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}

std::string to_upper_ascii(std::string text) {
  for (char& c : text) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return text;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string replace_all(const std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  std::string result;
  result.reserve(text.size());
  size_t start = 0;
  for (size_t found = text.find(from); found != std::string::npos; found = text.find(from, start)) {
    result.append(text, start, found - start);
    result += to;
    start = found + from.size();
  }
  result.append(text, start, std::string::npos);
  return result;
}

size_t utf8_sequence_length(const std::string& text, size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  size_t length = 1;
  if (lead >= 0xF0 && lead <= 0xF7) {
    length = 4;
  } else if (lead >= 0xE0) {
    length = 3;
  } else if (lead >= 0xC0) {
    length = 2;
  }
  if (lead < 0xC0 || lead > 0xF7) length = 1;
  for (size_t i = 1; i < length; ++i) {
    if (pos + i >= text.size() || (static_cast<unsigned char>(text[pos + i]) & 0xC0) != 0x80) {
      return 1;
    }
  }
  return length;
}

size_t code_point_count(const std::string& text) {
  size_t count = 0;
  for (size_t pos = 0; pos < text.size(); pos += utf8_sequence_length(text, pos)) ++count;
  return count;
}

std::string last_code_points(const std::string& text, size_t count) {
  // Walk back over whole sequences: a continuation byte never starts a code point.
  size_t start = text.size();
  size_t taken = 0;
  while (start > 0 && taken < count) {
    --start;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    ++taken;
  }
  return text.substr(start);
}

std::optional<double> parse_python_float(const std::string& text) {
  // Python reads other characters as ASCII first: whitespace as a space, a decimal digit of any
  // script as its ASCII digit; any other non-ASCII character makes the text invalid.
  std::string ascii;
  ascii.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ascii += text[pos++];
      continue;
    }
    const CodePoint c = code_point_at(text, pos);
    const int digit = python_decimal_value(c.value);
    if (is_python_space(c.value)) {
      ascii += ' ';
    } else if (digit >= 0) {
      ascii += static_cast<char>('0' + digit);
    } else {
      return std::nullopt;
    }
    pos += c.length;
  }
  const std::string body = trim_ascii(ascii);
  size_t i = 0;
  if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
  const std::string word = to_lower_ascii(body.substr(i));
  if (word == "inf" || word == "infinity" || word == "nan") {
    const bool negative = !body.empty() && body[0] == '-';
    if (word == "nan") return std::nan("");
    return negative ? -HUGE_VAL : HUGE_VAL;
  }
  size_t digits = 0;
  while (i < body.size() && is_ascii_digit(body[i])) ++i, ++digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    while (i < body.size() && is_ascii_digit(body[i])) ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    size_t exponent_digits = 0;
    while (i < body.size() && is_ascii_digit(body[i])) ++i, ++exponent_digits;
    if (exponent_digits == 0) return std::nullopt;
  }
  if (i != body.size()) return std::nullopt;
  return std::strtod(body.c_str(), nullptr);
}

std::string integer_text(double value) {
  if (value == 0 || !std::isfinite(value)) return "0";
  char buffer[400];  // the largest double has 309 digits
  std::snprintf(buffer, sizeof(buffer), "%.0f", std::trunc(value));
  return buffer;
}

}  // namespace ooze::rollout
