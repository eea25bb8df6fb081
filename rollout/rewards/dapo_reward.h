// --rm-type dapo: DAPO's Minerva-style check of the answer a response gives after "Answer:".
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace ooze::rollout {

// The response is cut to its last 300 characters (code points; MATH answers are shorter).
constexpr size_t kDapoResponseTailChars = 300;

// What follows the last "Answer:" (any case, spaces around the colon) up to the line end, or
// "[INVALID]" when there is none.
std::string extract_dapo_answer(const std::string& response);

// Minerva's normal form: the text after the last '=', article and spacing substitutions, units
// and filler words (dollars, degrees, \ldots, ...) removed, the first $...$ of a line kept,
// \text{} / \textbf{} / \overline{} / \boxed{} unwrapped, \fracab -> \frac{a}{b},
// \sqrta -> \sqrt{a}, $ removed, "1,000" -> "1000" (digits of any script, as str.isdigit
// reads them), trimmed.
std::string normalize_dapo_answer(const std::string& answer);

// {"score": 1.0 or -1.0, "acc": 1.0 or 0.0, "pred": the normalised prediction}: correct when
// the normalised prediction equals the label as an integer (DAPO's labels are integers:
// "12.0" -> "12", and "٤٢" -> "42" as Python's float() reads any decimal digits). A label that is
// not a number is compared in its normal form instead of failing. Use --reward-key score (and acc
// for evaluation).
nlohmann::json dapo_reward(const std::string& response, const std::string& label);

}  // namespace ooze::rollout
