#include "rollout/rewards/math_normalization.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "rollout/rewards/latex_to_text.h"
#include "rollout/rewards/python_unicode.h"
#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {
namespace {

// Hendrycks' normaliser gives up (and the caller keeps the answer as it was) on these.
struct MalformedAnswer {};

std::vector<std::string> split(const std::string& text, const std::string& separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t found = text.find(separator); found != std::string::npos;
       found = text.find(separator, start)) {
    parts.push_back(text.substr(start, found - start));
    start = found + separator.size();
  }
  parts.push_back(text.substr(start));
  return parts;
}

// "\text{...}" around the whole answer (one line, non-empty inside): the inside.
std::optional<std::string> enclosing_text_content(const std::string& answer) {
  const std::string open = "\\text{";
  if (answer.size() <= open.size() + 1 || !starts_with(answer, open) || answer.back() != '}') {
    return std::nullopt;
  }
  std::string inside = answer.substr(open.size(), answer.size() - open.size() - 1);
  if (contains(inside, "\n")) return std::nullopt;
  return inside;
}

std::string first_code_point(const std::string& text) {
  return text.substr(0, utf8_sequence_length(text, 0));
}

std::string fix_sqrt(const std::string& text) {
  if (!contains(text, "\\sqrt")) return text;
  const std::vector<std::string> parts = split(text, "\\sqrt");
  std::string result = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (part.empty()) throw MalformedAnswer{};
    if (part[0] != '{') {
      const std::string first = first_code_point(part);
      result += "\\sqrt{" + first + "}" + part.substr(first.size());
    } else {
      result += "\\sqrt" + part;
    }
  }
  return result;
}

// \frac12 -> \frac{1}{2}, \frac1{72} -> \frac{1}{72}.
std::string fix_fracs(const std::string& text) {
  const std::vector<std::string> parts = split(text, "\\frac");
  std::string result = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    result += "\\frac";
    if (part.empty()) throw MalformedAnswer{};
    if (part[0] == '{') {
      result += part;
      continue;
    }
    const std::string a = first_code_point(part);
    if (a.size() >= part.size()) return text;  // a single character after \frac: left alone
    const std::string b = first_code_point(part.substr(a.size()));
    const std::string rest = part.substr(a.size() + b.size());
    if (b != "{") {
      result += "{" + a + "}{" + b + "}" + rest;
    } else {
      result += "{" + a + "}" + b + rest;
    }
  }
  return result;
}

bool is_canonical_integer(const std::string& text) {
  if (text == "0") return true;
  size_t i = (!text.empty() && text[0] == '-') ? 1 : 0;
  if (i >= text.size() || text[i] == '0') return false;
  for (; i < text.size(); ++i) {
    if (!is_ascii_digit(text[i])) return false;
  }
  return true;
}

// "3/4" -> \frac{3}{4} when both sides are plain integers.
std::string fix_a_slash_b(const std::string& text) {
  const std::vector<std::string> parts = split(text, "/");
  if (parts.size() != 2 || !is_canonical_integer(parts[0]) || !is_canonical_integer(parts[1])) {
    return text;
  }
  return "\\frac{" + parts[0] + "}{" + parts[1] + "}";
}

std::string strip_string(std::string s) {
  s = replace_all(s, "\n", "");
  s = replace_all(s, "\\!", "");
  s = replace_all(s, "\\\\", "\\");
  s = replace_all(s, "tfrac", "frac");
  s = replace_all(s, "dfrac", "frac");
  s = replace_all(s, "\\left", "");
  s = replace_all(s, "\\right", "");
  s = replace_all(s, "^{\\circ}", "");
  s = replace_all(s, "^\\circ", "");
  s = replace_all(s, "\\$", "");
  // "\text{ " only ever introduces units on the right.
  if (contains(s, "\\text{ ")) {
    const std::vector<std::string> parts = split(s, "\\text{ ");
    if (parts.size() != 2) throw MalformedAnswer{};
    s = parts[0];
  }
  s = replace_all(s, "\\%", "");
  s = replace_all(s, " .", " 0.");
  s = replace_all(s, "{.", "{0.");
  if (s.empty()) return s;
  if (s[0] == '.') s = "0" + s;
  // "k = 5" -> "5" when the left side is at most two characters.
  const std::vector<std::string> sides = split(s, "=");
  if (sides.size() == 2 && code_point_count(sides[0]) <= 2) s = sides[1];
  s = fix_sqrt(s);
  s = replace_all(s, " ", "");
  s = fix_fracs(s);
  if (s == "0.5") s = "\\frac{1}{2}";
  return fix_a_slash_b(s);
}

// Slime's unit pattern "<unit>(es)?(s)? *(\^[0-9]+)?", every occurrence removed.
std::string remove_unit(const std::string& text, const std::string& unit) {
  std::string result;
  size_t pos = 0;
  while (true) {
    const size_t found = text.find(unit, pos);
    if (found == std::string::npos) break;
    result.append(text, pos, found - pos);
    size_t end = found + unit.size();
    if (text.compare(end, 2, "es") == 0) end += 2;
    if (end < text.size() && text[end] == 's') ++end;
    while (end < text.size() && text[end] == ' ') ++end;
    if (end + 1 < text.size() && text[end] == '^' && is_ascii_digit(text[end + 1])) {
      end += 1;
      while (end < text.size() && is_ascii_digit(text[end])) ++end;
    }
    pos = end;
  }
  result.append(text, pos, std::string::npos);
  return result;
}

// "^ *\circ" (and "^{\circ}", "°", which Slime leaves to the mathd form) removed.
std::string remove_degrees(const std::string& text) {
  std::string result;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == '^') {
      size_t end = pos + 1;
      while (end < text.size() && text[end] == ' ') ++end;
      if (text.compare(end, 5, "\\circ") == 0) {
        pos = end + 5;
        continue;
      }
    }
    result += text[pos++];
  }
  result = replace_all(result, "^{\\circ}", "");
  return replace_all(result, "°", "");
}

// ",\!" and the spaces after it.
std::string remove_latex_thousands_spacing(const std::string& text) {
  std::string result;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text.compare(pos, 3, ",\\!") == 0) {
      pos += 3;
      while (pos < text.size() && text[pos] == ' ') ++pos;
      continue;
    }
    result += text[pos++];
  }
  return result;
}

// "- 3" -> "-3".
std::string tighten_minus(const std::string& text) {
  std::string result;
  size_t pos = 0;
  while (pos < text.size()) {
    result += text[pos];
    if (text[pos++] == '-') {
      while (pos < text.size() && text[pos] == ' ') ++pos;
    }
  }
  return result;
}

// A mixed number "7 3/4" -> "7+3/4": digit, spaces, digit (matches do not overlap).
std::string join_mixed_numbers(const std::string& text) {
  std::string result;
  size_t pos = 0;
  while (pos < text.size()) {
    if (is_ascii_digit(text[pos])) {
      size_t next = pos + 1;
      while (next < text.size() && text[next] == ' ') ++next;
      if (next > pos + 1 && next < text.size() && is_ascii_digit(text[next])) {
        result += text[pos];
        result += '+';
        result += text[next];
        pos = next + 1;
        continue;
      }
    }
    result += text[pos++];
  }
  return result;
}

std::string erase_chars(const std::string& text, const std::string& chars) {
  std::string result;
  for (char c : text) {
    if (chars.find(c) == std::string::npos) result += c;
  }
  return result;
}

}  // namespace

std::string strip_math_answer(const std::string& answer) {
  std::string trimmed = trim_ascii(answer);
  if (auto inside = enclosing_text_content(trimmed)) trimmed = trim_ascii(*inside);
  try {
    return strip_string(trimmed);
  } catch (const MalformedAnswer&) {
    return trimmed;
  }
}

std::string strip_thousands_separators(const std::string& text) {
  // Slime's (\d)(,)(\d\d\d)($|\D), whose \d is any Unicode decimal digit, over code points.
  // Each pass removes the separators a left-to-right scan finds; a separator consumed as the
  // terminator of the previous match waits for the next pass. Bounded: real numbers need a few.
  std::string current = text;
  for (int pass = 0; pass < 64 && contains(current, ","); ++pass) {
    struct Character {
      size_t begin;
      size_t length;
      bool digit;
    };
    std::vector<Character> characters;
    for (size_t pos = 0; pos < current.size();) {
      const CodePoint c = code_point_at(current, pos);
      characters.push_back({pos, c.length, python_decimal_value(c.value) >= 0});
      pos += c.length;
    }
    const auto digit = [&](size_t k) { return characters[k].digit; };
    std::string next;
    next.reserve(current.size());
    size_t i = 0;
    const size_t n = characters.size();
    while (i < n) {
      const bool match = i + 4 < n && digit(i) && current[characters[i + 1].begin] == ',' &&
                         digit(i + 2) && digit(i + 3) && digit(i + 4) &&
                         (i + 5 == n || !digit(i + 5));
      // The comma goes; the digits and the terminator stay.
      const size_t end = match ? std::min(i + 6, n) : i + 1;
      for (size_t k = i; k < end; ++k) {
        if (!(match && k == i + 1)) next.append(current, characters[k].begin, characters[k].length);
      }
      i = end;
    }
    if (next == current) break;
    current = std::move(next);
  }
  return current;
}

bool is_integer_text(const std::string& text) {
  const std::optional<double> value = parse_python_float(strip_thousands_separators(text));
  return value && std::isfinite(*value) && std::fabs(*value - std::round(*value)) <= 1e-7;
}

std::string integer_digits(const std::string& text) {
  const std::optional<double> value = parse_python_float(strip_thousands_separators(text));
  return integer_text(value ? std::round(*value) : 0.0);
}

bool is_fraction_text(const std::string& text) {
  // -?[0-9]+.?/0*[1-9][0-9]*.?  over bytes; each ".?" is any one character or none.
  size_t i = (!text.empty() && text[0] == '-') ? 1 : 0;
  const size_t digits_start = i;
  while (i < text.size() && is_ascii_digit(text[i])) ++i;
  if (i == digits_start) return false;
  auto denominator_matches = [&](size_t pos) {
    if (pos >= text.size() || text[pos] != '/') return false;
    ++pos;
    while (pos < text.size() && text[pos] == '0') ++pos;
    if (pos >= text.size() || text[pos] < '1' || text[pos] > '9') return false;
    ++pos;
    while (pos < text.size() && is_ascii_digit(text[pos])) ++pos;
    return pos == text.size() || pos + 1 == text.size();
  };
  // The slash comes right after the numerator's digits, or one (any) character later.
  return denominator_matches(i) || (i < text.size() && denominator_matches(i + 1));
}

std::string normalize_math_answer(const std::string& answer) {
  std::string expr = answer;
  if (auto inside = enclosing_text_content(expr)) expr = *inside;
  expr = replace_all(expr, "\\%", "%");
  expr = replace_all(expr, "\\$", "$");
  expr = erase_chars(expr, "$%");
  expr = replace_all(expr, " or ", " , ");
  expr = replace_all(expr, " and ", " , ");
  expr = replace_all(expr, "million", "*10^6");
  expr = replace_all(expr, "billion", "*10^9");
  expr = replace_all(expr, "trillion", "*10^12");
  for (const char* unit :
       {"degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week",
        "month", "year", "foot", "feet", "inch", "yard"}) {
    expr = remove_unit(expr, unit);
  }
  expr = remove_degrees(expr);
  if (expr.size() >= 2 && expr.front() == '{' && expr.back() == '}') {
    expr = expr.substr(1, expr.size() - 2);
  }
  expr = remove_latex_thousands_spacing(expr);
  if (const std::optional<double> value = parse_python_float(expr)) {
    if (std::isfinite(*value) && std::fabs(*value - std::round(*value)) <= 1e-7) {
      expr = integer_text(std::round(*value));
    }
  }
  // Slime converts only text with a backslash; braces group too (x^{n+1}), so they count.
  if (contains(expr, "\\") || contains(expr, "{")) {
    if (auto plain = latex_to_text(expr)) expr = *plain;
  }
  expr = tighten_minus(expr);
  expr = join_mixed_numbers(expr);
  expr = erase_chars(expr, " {}");
  expr = to_lower_ascii(expr);
  if (is_integer_text(expr)) expr = integer_digits(expr);
  return expr;
}

}  // namespace ooze::rollout
