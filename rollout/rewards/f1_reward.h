// --rm-type f1: SQuAD / HotpotQA token F1 between the response and the label.
#pragma once

#include <string>

namespace ooze::rollout {

struct TokenF1 {
  double f1 = 0;
  double precision = 0;
  double recall = 0;
};

// SQuAD's answer normal form with Python's str rules (python_unicode.h): lower case in any
// script (ZÜRICH -> zürich), ASCII punctuation removed (string.punctuation), the articles a / an
// / the removed where re's \b sees a word boundary, whitespace (U+00A0 and U+3000 too) collapsed
// to single spaces.
std::string normalize_squad_answer(const std::string& text);

// Token F1 of the normalised texts (tokens counted with multiplicity). A "yes", "no" or
// "noanswer" on either side scores 0 unless both sides are the same; no common token scores 0.
TokenF1 token_f1(const std::string& prediction, const std::string& ground_truth);

// token_f1(response, label).f1.
double f1_reward(const std::string& response, const std::string& label);

}  // namespace ooze::rollout
