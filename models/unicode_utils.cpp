#include "models/unicode_utils.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>

#include "core/error.h"

namespace ooze {
namespace models {

bool decode_utf8(std::string_view text, size_t pos, char32_t* code_point, size_t* length) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) {
    *code_point = lead;
    *length = 1;
    return true;
  }
  size_t need;  // continuation bytes after the lead
  unsigned char second_min = 0x80, second_max = 0xBF;
  char32_t value;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
    value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    value = lead & 0x0F;
    if (lead == 0xE0) second_min = 0xA0;  // overlong
    if (lead == 0xED) second_max = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    value = lead & 0x07;
    if (lead == 0xF0) second_min = 0x90;  // overlong
    if (lead == 0xF4) second_max = 0x8F;  // above U+10FFFF
  } else {
    *length = 1;
    return false;
  }
  for (size_t i = 1; i <= need; ++i) {
    const unsigned char lo = i == 1 ? second_min : 0x80;
    const unsigned char hi = i == 1 ? second_max : 0xBF;
    if (pos + i >= text.size() || byte(pos + i) < lo || byte(pos + i) > hi) {
      *length = i;  // the maximal subpart: the lead and the continuation bytes that fit
      return false;
    }
    value = (value << 6) | (byte(pos + i) & 0x3F);
  }
  *code_point = value;
  *length = need + 1;
  return true;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    char32_t cp;
    size_t length;
    if (!decode_utf8(text, pos, &cp, &length)) return false;
    pos += length;
  }
  return true;
}

std::string utf8_lossy(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp;
    size_t length;
    if (decode_utf8(text, pos, &cp, &length)) {
      out.append(text.substr(pos, length));
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
    }
    pos += length;
  }
  return out;
}

namespace {

const icu::Normalizer2& nfc_instance() {
  static const icu::Normalizer2* instance = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
    if (U_FAILURE(status) || nfc == nullptr) {
      throw Error(std::string("ICU cannot provide its NFC normalizer: ") + u_errorName(status) +
                  "; check that the ICU data library (libicudata) is installed");
    }
    return nfc;
  }();
  return *instance;
}

void append_nfc_of_valid(std::string_view valid, std::string& out) {
  const icu::Normalizer2& nfc = nfc_instance();
  const icu::StringPiece piece(valid.data(), static_cast<int32_t>(valid.size()));
  UErrorCode status = U_ZERO_ERROR;
  if (nfc.isNormalizedUTF8(piece, status) && U_SUCCESS(status)) {
    out.append(valid);
    return;
  }
  status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out);
  nfc.normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) {
    throw Error(std::string("ICU NFC normalization failed: ") + u_errorName(status));
  }
}

}  // namespace

std::string nfc_normalize(std::string_view text) {
  // Most text is ASCII, which NFC never changes.
  bool ascii = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t run_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp;
    size_t length;
    if (decode_utf8(text, pos, &cp, &length)) {
      pos += length;
      continue;
    }
    append_nfc_of_valid(text.substr(run_start, pos - run_start), out);
    out.append(text.substr(pos, length));  // ill-formed bytes pass through unchanged
    pos += length;
    run_start = pos;
  }
  append_nfc_of_valid(text.substr(run_start), out);
  return out;
}

bool is_unicode_whitespace(char32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string python_strip(std::string_view text) {
  size_t begin = 0;
  size_t end = text.size();
  char32_t cp;
  size_t length;
  while (begin < end && decode_utf8(text, begin, &cp, &length) && is_python_space(cp)) {
    begin += length;
  }
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!decode_utf8(text, start, &cp, &length) || start + length != end || !is_python_space(cp)) {
      break;
    }
    end = start;
  }
  return std::string(text.substr(begin, end - begin));
}

bool is_word_character(char32_t cp) {
  const UChar32 c = static_cast<UChar32>(cp);
  const uint32_t category_mask = U_GET_GC_MASK(c);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) ||
         (category_mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0 ||
         u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL);
}

}  // namespace models
}  // namespace ooze
