#include "rollout/rewards/f1_reward.h"

#include <cstring>
#include <unordered_map>
#include <vector>

#include "rollout/rewards/python_unicode.h"

namespace ooze::rollout {
namespace {

// Python's string.punctuation.
bool is_ascii_punctuation(char c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
         (c >= '{' && c <= '~');
}

bool word_character_at(const std::string& text, size_t pos) {
  return pos < text.size() && is_python_word(code_point_at(text, pos).value);
}

// re.sub(r"\b(a|an|the)\b", " ", text), with Python's \b: a boundary between a word character
// (a letter, digit or numeral of any script, or _) and anything else. So "l’a" and "the—end"
// lose their article while "theory" and "aé" keep it; combining marks are not word characters.
std::string replace_articles(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool after_word = false;  // whether the character before `pos` is a word character
  size_t pos = 0;
  while (pos < text.size()) {
    if (!after_word) {
      bool replaced = false;
      for (const char* article : {"a", "an", "the"}) {
        const size_t length = std::strlen(article);
        if (text.compare(pos, length, article) == 0 && !word_character_at(text, pos + length)) {
          out += ' ';
          pos += length;
          replaced = true;
          break;
        }
      }
      if (replaced) {
        after_word = true;
        continue;
      }
    }
    const CodePoint c = code_point_at(text, pos);
    out.append(text, pos, c.length);
    after_word = is_python_word(c.value);
    pos += c.length;
  }
  return out;
}

}  // namespace

std::string normalize_squad_answer(const std::string& text) {
  std::string kept;
  for (char c : python_lower(text)) {
    if (!is_ascii_punctuation(c)) kept += c;
  }
  std::string normalized;
  for (const std::string& token : python_split(replace_articles(kept))) {
    if (!normalized.empty()) normalized += ' ';
    normalized += token;
  }
  return normalized;
}

TokenF1 token_f1(const std::string& prediction, const std::string& ground_truth) {
  const std::string predicted = normalize_squad_answer(prediction);
  const std::string truth = normalize_squad_answer(ground_truth);
  for (const char* special : {"yes", "no", "noanswer"}) {
    if ((predicted == special || truth == special) && predicted != truth) return {};
  }
  const std::vector<std::string> predicted_tokens = python_split(predicted);
  const std::vector<std::string> truth_tokens = python_split(truth);
  std::unordered_map<std::string, int> truth_counts;
  for (const std::string& token : truth_tokens) ++truth_counts[token];
  int common = 0;
  for (const std::string& token : predicted_tokens) {
    auto found = truth_counts.find(token);
    if (found != truth_counts.end() && found->second > 0) {
      --found->second;
      ++common;
    }
  }
  if (common == 0) return {};
  TokenF1 score;
  score.precision = static_cast<double>(common) / static_cast<double>(predicted_tokens.size());
  score.recall = static_cast<double>(common) / static_cast<double>(truth_tokens.size());
  score.f1 = 2 * score.precision * score.recall / (score.precision + score.recall);
  return score;
}

double f1_reward(const std::string& response, const std::string& label) {
  return token_f1(response, label).f1;
}

}  // namespace ooze::rollout
