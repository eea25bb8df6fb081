#include "rollout/rewards/dapo_reward.h"

#include <cmath>
#include <optional>
#include <utility>

#include "rollout/rewards/python_unicode.h"
#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {
namespace {

bool starts_with_ignoring_case(const std::string& text, size_t pos, const std::string& word) {
  if (pos + word.size() > text.size()) return false;
  for (size_t i = 0; i < word.size(); ++i) {
    char c = text[pos + i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != word[i]) return false;
  }
  return true;
}

// Every `open` whose closing '}' `find_close(content)` finds (npos: none) -> its content, left to
// right; an occurrence without one is kept as it is.
template <typename FindClose>
std::string unwrap(const std::string& text, const std::string& open, FindClose find_close) {
  std::string result;
  size_t pos = 0;
  for (size_t found = text.find(open); found != std::string::npos; found = text.find(open, pos)) {
    const size_t content = found + open.size();
    const size_t close = find_close(content);
    if (close != std::string::npos) {
      result.append(text, pos, found - pos);
      result.append(text, content, close - content);
      pos = close + 1;
    } else {
      result.append(text, pos, found + 1 - pos);
      pos = found + 1;
    }
  }
  result.append(text, pos, std::string::npos);
  return result;
}

// Every "\open...}" (one line, up to the first '}') -> its content.
std::string unwrap_first_brace(const std::string& text, const std::string& open) {
  return unwrap(text, open, [&](size_t content) {
    const size_t close = text.find_first_of("}\n", content);
    return close != std::string::npos && text[close] == '}' ? close : std::string::npos;
  });
}

// Every "\boxed{...}" -> its content up to the last '}' of its line.
std::string unwrap_boxed_greedy(const std::string& text) {
  return unwrap(text, "\\boxed{", [&](size_t content) {
    const size_t line_end = std::min(text.find('\n', content), text.size());
    const size_t close = line_end > content ? text.rfind('}', line_end - 1) : std::string::npos;
    return close != std::string::npos && close >= content ? close : std::string::npos;
  });
}

// A line holding two $ keeps only "$<between the first two>$".
std::string keep_first_inline_math(const std::string& text) {
  std::string result;
  size_t line_start = 0;
  while (true) {
    const size_t line_end = std::min(text.find('\n', line_start), text.size());
    const std::string line = text.substr(line_start, line_end - line_start);
    const size_t first = line.find('$');
    const size_t second = first == std::string::npos ? first : line.find('$', first + 1);
    if (second != std::string::npos) {
      result += "$" + line.substr(first + 1, second - first - 1) + "$";
    } else {
      result += line;
    }
    if (line_end >= text.size()) break;
    result += '\n';
    line_start = line_end + 1;
  }
  return result;
}

// "\fracab" -> "\frac{a}{b}" and "\sqrta" -> "\sqrt{a}" (one character each).
std::string brace_shorthand(const std::string& text, const std::string& name, int arguments) {
  std::string result;
  size_t pos = 0;
  for (size_t found = text.find(name); found != std::string::npos; found = text.find(name, pos)) {
    size_t at = found + name.size();
    std::string replacement = name;
    bool matched = at < text.size() && text[at] != '{';
    for (int i = 0; matched && i < arguments; ++i) {
      if (at >= text.size() || (i > 0 && text[at] == '\n')) {
        matched = false;
        break;
      }
      const size_t length = utf8_sequence_length(text, at);
      replacement += "{" + text.substr(at, length) + "}";
      at += length;
    }
    result.append(text, pos, found - pos);
    if (matched) {
      result += replacement;
      pos = at;
    } else {
      result += text[found];
      pos = found + 1;
    }
  }
  result.append(text, pos, std::string::npos);
  return result;
}

}  // namespace

std::string extract_dapo_answer(const std::string& response) {
  // Python's findall of (?i)Answer\s*:\s*([^\n]+): the last match wins.
  std::optional<std::string> last;
  const size_t n = response.size();
  size_t pos = 0;
  while (pos < n) {
    if (!starts_with_ignoring_case(response, pos, "answer")) {
      ++pos;
      continue;
    }
    size_t colon = pos + 6;
    while (colon < n && is_ascii_space(response[colon])) ++colon;
    if (colon >= n || response[colon] != ':') {
      ++pos;
      continue;
    }
    size_t begin = colon + 1;
    while (begin < n && is_ascii_space(response[begin])) ++begin;
    if (begin >= n) {
      // Only whitespace after the colon: the regex backs off to its last non-newline character.
      size_t back = n;
      while (back > colon + 1 && response[back - 1] == '\n') --back;
      if (back == colon + 1) {
        ++pos;
        continue;
      }
      begin = back - 1;
    }
    const size_t end = std::min(response.find('\n', begin), n);
    last = response.substr(begin, end - begin);
    pos = end;
  }
  return last ? *last : "[INVALID]";
}

std::string normalize_dapo_answer(const std::string& answer) {
  const size_t equals = answer.rfind('=');
  std::string s = equals == std::string::npos ? answer : answer.substr(equals + 1);
  static const std::pair<const char*, const char*> kSubstitutions[] = {
      {"an ", ""},          {"a ", ""},
      {".$", "$"},          {"\\$", ""},
      {"\\ ", ""},          {" ", ""},
      {"mbox", "text"},     {",\\text{and}", ","},
      {"\\text{and}", ","}, {"\\text{m}", "\\text{}"},
  };
  for (const auto& [before, after] : kSubstitutions) s = replace_all(s, before, after);
  static const char* const kRemoved[] = {
      "square",
      "ways",
      "integers",
      "dollars",
      "mph",
      "inches",
      "hours",
      "km",
      "units",
      "\\ldots",
      "sue",
      "points",
      "feet",
      "minutes",
      "digits",
      "cents",
      "degrees",
      "cm",
      "gm",
      "pounds",
      "meters",
      "meals",
      "edges",
      "students",
      "childrentickets",
      "multiples",
      "\\text{s}",
      "\\text{.}",
      "\\text{\ns}",
      "\\text{}^2",
      "\\text{}^3",
      "\\text{\n}",
      "\\text{}",
      "\\mathrm{th}",
      "^\\circ",
      "^{\\circ}",
      "\\;",
      ",\\!",
      "{,}",
      "\"",
      "\\dots",
      "<|im_end|>",
      "<|endoftext|>",
  };
  for (const char* removed : kRemoved) s = replace_all(s, removed, "");
  s = keep_first_inline_math(s);
  s = unwrap_first_brace(s, "\\text{");
  s = unwrap_first_brace(s, "\\textbf{");
  s = unwrap_first_brace(s, "\\overline{");
  s = unwrap_boxed_greedy(s);
  s = brace_shorthand(s, "frac", 2);
  s = brace_shorthand(s, "sqrt", 1);
  s = replace_all(s, "$", "");
  // str.isdigit: digits of any script ("１,０００"), and ² too.
  if (is_python_digit_text(replace_all(s, ",", ""))) s = replace_all(s, ",", "");
  return trim_ascii(s);
}

nlohmann::json dapo_reward(const std::string& response, const std::string& label) {
  const std::string tail = last_code_points(response, kDapoResponseTailChars);
  const std::string prediction = normalize_dapo_answer(extract_dapo_answer(tail));
  std::string truth = normalize_dapo_answer(label);
  const std::optional<double> number = parse_python_float(truth);
  if (number && std::isfinite(*number)) truth = integer_text(*number);
  const bool correct = prediction == truth;
  return {{"score", correct ? 1.0 : -1.0}, {"acc", correct ? 1.0 : 0.0}, {"pred", prediction}};
}

}  // namespace ooze::rollout
