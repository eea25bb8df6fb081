#include "rollout/rewards/gpqa_reward.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {
namespace {

bool is_word_byte(char c) {
  return is_ascii_letter(c) || is_ascii_digit(c) || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

// `word` (lower case) at `pos`, in any case.
bool word_at(const std::string& text, size_t pos, const char* word) {
  for (; *word != '\0'; ++word, ++pos) {
    if (pos >= text.size()) return false;
    char c = text[pos];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != *word) return false;
  }
  return true;
}

size_t skip_spaces(const std::string& text, size_t pos) {
  while (pos < text.size() && is_ascii_space(text[pos])) ++pos;
  return pos;
}

// A letter (either case) that is a word of its own; its upper case.
std::optional<char> standalone_letter(const std::string& text, size_t pos) {
  if (pos >= text.size() || !is_ascii_letter(text[pos])) return std::nullopt;
  if (pos > 0 && is_word_byte(text[pos - 1])) return std::nullopt;
  if (pos + 1 < text.size() && is_word_byte(text[pos + 1])) return std::nullopt;
  const char c = text[pos];
  return static_cast<char>(c >= 'a' ? c - 'a' + 'A' : c);
}

// After a keyword ending at `pos`: \s*(?:is|:)?\s*(letter).
std::optional<char> letter_after_keyword(const std::string& text, size_t pos) {
  const size_t after = skip_spaces(text, pos);
  if (word_at(text, after, "is")) {
    if (auto letter = standalone_letter(text, skip_spaces(text, after + 2))) return letter;
  }
  if (after < text.size() && text[after] == ':') {
    if (auto letter = standalone_letter(text, skip_spaces(text, after + 1))) return letter;
  }
  return standalone_letter(text, after);
}

// The letter of the first match of each pattern (the first that matches anywhere decides).
std::optional<char> answer_is_letter(const std::string& text) {
  for (size_t pos = 0; pos < text.size(); ++pos) {
    for (const char* keyword : {"answer", "option", "choice"}) {
      if (!word_at(text, pos, keyword)) continue;
      if (auto letter = letter_after_keyword(text, pos + std::char_traits<char>::length(keyword))) {
        return letter;
      }
    }
  }
  return std::nullopt;
}

std::optional<char> letter_is_correct(const std::string& text) {
  for (size_t pos = 0; pos < text.size(); ++pos) {
    const std::optional<char> letter = standalone_letter(text, pos);
    if (!letter) continue;
    const size_t is = skip_spaces(text, pos + 1);
    if (!word_at(text, is, "is")) continue;
    const size_t after_is = skip_spaces(text, is + 2);
    if (word_at(text, after_is, "the") &&
        word_at(text, skip_spaces(text, after_is + 3), "correct")) {
      return letter;
    }
    if (word_at(text, after_is, "correct")) return letter;
  }
  return std::nullopt;
}

std::optional<char> final_answer_letter(const std::string& text) {
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!word_at(text, pos, "final")) continue;
    const size_t keyword = skip_spaces(text, pos + 5);
    for (const char* name : {"answer", "option"}) {
      if (!word_at(text, keyword, name)) continue;
      if (auto letter =
              letter_after_keyword(text, keyword + std::char_traits<char>::length(name))) {
        return letter;
      }
    }
  }
  return std::nullopt;
}

std::string after_reasoning(const std::string& text) {
  const std::string marker = "</think>";
  const size_t found = text.rfind(marker);
  return found == std::string::npos ? text : text.substr(found + marker.size());
}

// Lower case, every run of characters other than [a-z0-9] -> one space, trimmed.
std::string normalize_choice_text(const std::string& text) {
  std::string result;
  bool gap = false;
  for (char c : to_lower_ascii(text)) {
    if ((c >= 'a' && c <= 'z') || is_ascii_digit(c)) {
      if (gap && !result.empty()) result += ' ';
      gap = false;
      result += c;
    } else {
      gap = true;
    }
  }
  return result;
}

bool contains_letter(const std::vector<std::string>& letters, const std::string& letter) {
  return std::find(letters.begin(), letters.end(), letter) != letters.end();
}

// Python's truth value and str() of a metadata value.
bool truthy(const nlohmann::json& value) {
  if (value.is_string()) return !value.get<std::string>().empty();
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number()) return value.get<double>() != 0;
  if (value.is_array() || value.is_object()) return !value.empty();
  return false;
}

std::string python_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  if (value.is_null()) return "None";
  return value.dump();
}

std::vector<nlohmann::json> metadata_choices(const nlohmann::json& metadata) {
  std::vector<nlohmann::json> choices;
  if (!metadata.is_object()) return choices;
  const auto found = metadata.find("choices");
  if (found == metadata.end()) return choices;
  if (found->is_array() || found->is_object()) {
    for (const auto& choice : *found) choices.push_back(choice);
  }
  return choices;
}

// A label that is a JSON number (the dataset stored an index).
std::optional<double> numeric_label(const std::string& label) {
  const nlohmann::json parsed = nlohmann::json::parse(label, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_number()) return std::nullopt;
  return parsed.get<double>();
}

}  // namespace

std::vector<std::string> gpqa_valid_letters(const nlohmann::json& metadata) {
  std::vector<std::string> letters;
  if (metadata.is_object()) {
    const auto given = metadata.find("valid_letters");
    if (given != metadata.end() && truthy(*given)) {
      if (given->is_string()) {
        for (char c : given->get<std::string>())
          letters.push_back(to_upper_ascii(std::string(1, c)));
      } else if (given->is_array()) {
        for (const auto& letter : *given) {
          letters.push_back(to_upper_ascii(python_text(letter)));
        }
      }
      if (!letters.empty()) return letters;
    }
  }
  size_t count = metadata_choices(metadata).size();
  if (count == 0) count = 10;
  for (size_t i = 0; i < std::min<size_t>(count, 26); ++i) {
    letters.push_back(std::string(1, static_cast<char>('A' + i)));
  }
  return letters;
}

std::optional<std::string> extract_choice_letter(const std::string& response,
                                                 const std::vector<std::string>& valid_letters) {
  if (response.empty()) return std::nullopt;
  const std::string text = after_reasoning(response);
  for (auto pattern : {answer_is_letter, letter_is_correct, final_answer_letter}) {
    if (const std::optional<char> letter = pattern(text)) {
      if (contains_letter(valid_letters, std::string(1, *letter))) return std::string(1, *letter);
    }
  }
  // The last standalone capital letter that is an option.
  for (size_t pos = text.size(); pos-- > 0;) {
    if (text[pos] < 'A' || text[pos] > 'Z') continue;
    if (!standalone_letter(text, pos)) continue;
    const std::string letter(1, text[pos]);
    if (contains_letter(valid_letters, letter)) return letter;
  }
  return std::nullopt;
}

double gpqa_reward(const std::string& response, const std::string& label,
                   const nlohmann::json& metadata) {
  const nlohmann::json meta = metadata.is_object() ? metadata : nlohmann::json::object();
  const std::vector<nlohmann::json> choices = metadata_choices(meta);
  const std::vector<std::string> valid_letters = gpqa_valid_letters(meta);

  std::string correct_letter;
  if (meta.contains("correct_letter") && meta["correct_letter"].is_string()) {
    correct_letter = to_upper_ascii(trim_ascii(meta["correct_letter"].get<std::string>()));
  }
  std::string label_text;
  if (const std::optional<double> index = numeric_label(label)) {
    const double whole = std::trunc(*index);
    if (whole >= 0 && whole < static_cast<double>(valid_letters.size())) {
      correct_letter = valid_letters[static_cast<size_t>(whole)];
    }
  } else {
    label_text = trim_ascii(label);
  }
  const std::string label_upper = to_upper_ascii(label_text);
  const bool label_is_letter =
      label_text.size() == 1 && contains_letter(valid_letters, label_upper);
  if (label_is_letter && correct_letter.empty()) correct_letter = label_upper;
  if (correct_letter.empty() && !choices.empty() && !label_text.empty()) {
    const std::string wanted = normalize_choice_text(label_text);
    for (size_t i = 0; i < choices.size() && i < valid_letters.size(); ++i) {
      if (normalize_choice_text(python_text(choices[i])) == wanted) {
        correct_letter = valid_letters[i];
        break;
      }
    }
  }

  const std::optional<std::string> extracted = extract_choice_letter(response, valid_letters);
  if (extracted && !correct_letter.empty()) return *extracted == correct_letter ? 1.0 : 0.0;

  std::vector<std::string> candidates;
  if (!correct_letter.empty() && !choices.empty()) {
    const auto letter = std::find(valid_letters.begin(), valid_letters.end(), correct_letter);
    const size_t index = static_cast<size_t>(letter - valid_letters.begin());
    if (letter != valid_letters.end() && index < choices.size()) {
      candidates.push_back(python_text(choices[index]));
    }
  }
  for (const char* key : {"correct_answer", "answer_text"}) {
    if (meta.contains(key) && truthy(meta[key])) candidates.push_back(python_text(meta[key]));
  }
  if (!label_text.empty() && !label_is_letter) candidates.push_back(label_text);
  const std::string haystack = " " + normalize_choice_text(after_reasoning(response)) + " ";
  for (const std::string& candidate : candidates) {
    const std::string target = normalize_choice_text(candidate);
    if (!target.empty() && contains(haystack, " " + target + " ")) return 1.0;
  }
  if (extracted && correct_letter.empty() && !label_text.empty()) {
    return *extracted == label_upper ? 1.0 : 0.0;
  }
  return 0.0;
}

}  // namespace ooze::rollout
