// --rm-type gpqa: multiple-choice grading (GPQA and similar), as Slime's rule does it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ooze::rollout {

// The option letters a response may pick: metadata "valid_letters" (upper-cased), else one
// letter per entry of metadata "choices" (a list, or an object's values), else A to J.
std::vector<std::string> gpqa_valid_letters(const nlohmann::json& metadata);

// The letter a response picks, looking after its last "</think>": the first "answer / option /
// choice [is|:] X", else the first "X is (the) correct", else the first "final answer [is|:] X"
// (any case), else the last standalone capital letter; a letter counts only when it is one of
// `valid_letters`. Unlike Slime's patterns, X must stand alone (not inside a word), so "the
// answer is (B)" is not read as the I of "is".
std::optional<std::string> extract_choice_letter(const std::string& response,
                                                 const std::vector<std::string>& valid_letters);

// 1.0 or 0.0. The correct letter is metadata "correct_letter", else a one-letter label, else a
// numeric label as an index (0 -> A), else the choice whose text matches the label. With both
// an extracted and a correct letter they decide; otherwise the response scores 1 when it
// contains the correct choice's text (or metadata "correct_answer" / "answer_text", or a
// non-letter label) as whole words, case and punctuation aside.
double gpqa_reward(const std::string& response, const std::string& label,
                   const nlohmann::json& metadata);

}  // namespace ooze::rollout
