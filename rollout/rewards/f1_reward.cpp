#include "rollout/rewards/f1_reward.h"

#include <unordered_map>
#include <vector>

#include "rollout/rewards/reward_text.h"

namespace ooze::rollout {
namespace {

bool is_ascii_punctuation(char c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
         (c >= '{' && c <= '~');
}

std::vector<std::string> whitespace_tokens(const std::string& text) {
  std::vector<std::string> tokens;
  std::string current;
  for (char c : text) {
    if (is_ascii_space(c)) {
      if (!current.empty()) tokens.push_back(std::move(current));
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) tokens.push_back(std::move(current));
  return tokens;
}

}  // namespace

std::string normalize_squad_answer(const std::string& text) {
  std::string kept;
  for (char c : to_lower_ascii(text)) {
    if (!is_ascii_punctuation(c)) kept += c;
  }
  std::string normalized;
  for (const std::string& token : whitespace_tokens(kept)) {
    if (token == "a" || token == "an" || token == "the") continue;
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
  const std::vector<std::string> predicted_tokens = whitespace_tokens(predicted);
  const std::vector<std::string> truth_tokens = whitespace_tokens(truth);
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
