#include "rollout/rewards/python_unicode.h"

#include <unicode/bytestream.h>
#include <unicode/casemap.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace ooze::rollout {
namespace {

int numeric_type(int code_point) {
  return u_getIntPropertyValue(static_cast<UChar32>(code_point), UCHAR_NUMERIC_TYPE);
}

bool is_ascii_text(const std::string& text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// ICU's root-locale lower case is Unicode's default full mapping, final sigma included: what
// Python's str.lower() applies.
void append_lower_of_valid(const std::string& text, size_t begin, size_t end, std::string& out) {
  if (begin == end) return;
  const icu::StringPiece piece(text.data() + begin, static_cast<int32_t>(end - begin));
  icu::StringByteSink<std::string> sink(&out);
  UErrorCode status = U_ZERO_ERROR;
  icu::CaseMap::utf8ToLower("", 0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) {
    throw Error(std::string("ICU cannot lower-case a reward text: ") + u_errorName(status) +
                "; check that the ICU data library (libicudata) is installed");
  }
}

}  // namespace

CodePoint code_point_at(const std::string& text, size_t pos) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data() + pos);
  const auto available = static_cast<int32_t>(std::min<size_t>(4, text.size() - pos));
  int32_t length = 0;
  UChar32 value = 0;
  U8_NEXT(bytes, length, available, value);
  return {value < 0 ? -1 : static_cast<int>(value), static_cast<size_t>(length)};
}

bool is_python_space(int code_point) {
  if (code_point < 0) return false;
  const auto c = static_cast<UChar32>(code_point);
  const UCharDirection direction = u_charDirection(c);
  return direction == U_WHITE_SPACE_NEUTRAL || direction == U_BLOCK_SEPARATOR ||
         direction == U_SEGMENT_SEPARATOR || u_charType(c) == U_SPACE_SEPARATOR;
}

int python_decimal_value(int code_point) {
  if (code_point < 0) return -1;
  if (code_point < 0x80) return code_point >= '0' && code_point <= '9' ? code_point - '0' : -1;
  return u_charDigitValue(static_cast<UChar32>(code_point));
}

bool is_python_digit(int code_point) {
  if (code_point < 0) return false;
  const int type = numeric_type(code_point);
  return type == U_NT_DECIMAL || type == U_NT_DIGIT;
}

bool is_python_word(int code_point) {
  if (code_point < 0) return false;
  if (code_point == '_') return true;
  return (U_GET_GC_MASK(static_cast<UChar32>(code_point)) & U_GC_L_MASK) != 0 ||
         numeric_type(code_point) != U_NT_NONE;
}

bool is_python_digit_text(const std::string& text) {
  if (text.empty()) return false;
  for (size_t pos = 0; pos < text.size();) {
    const CodePoint c = code_point_at(text, pos);
    if (!is_python_digit(c.value)) return false;
    pos += c.length;
  }
  return true;
}

std::vector<std::string> python_split(const std::string& text) {
  std::vector<std::string> parts;
  size_t begin = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const CodePoint c = code_point_at(text, pos);
    if (is_python_space(c.value)) {
      if (pos > begin) parts.push_back(text.substr(begin, pos - begin));
      begin = pos + c.length;
    }
    pos += c.length;
  }
  if (pos > begin) parts.push_back(text.substr(begin, pos - begin));
  return parts;
}

std::string python_lower(const std::string& text) {
  if (is_ascii_text(text)) {
    std::string lower = text;
    for (char& c : lower) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return lower;
  }
  // Runs of well-formed UTF-8 are lower-cased whole, so that a sigma sees its neighbours.
  std::string out;
  out.reserve(text.size());
  size_t run_begin = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const CodePoint c = code_point_at(text, pos);
    if (c.value < 0) {
      append_lower_of_valid(text, run_begin, pos, out);
      out.append(text, pos, c.length);
      run_begin = pos + c.length;
    }
    pos += c.length;
  }
  append_lower_of_valid(text, run_begin, text.size(), out);
  return out;
}

}  // namespace ooze::rollout
