// --rm-type math: Slime's verl-style grading of the response's last \boxed{} answer.
#pragma once

#include <cstddef>
#include <string>

namespace ooze::rollout {

// Answers longer than this are compared as trimmed strings only (normalising and parsing them
// is what a runaway response would make slow).
constexpr size_t kMaxGradedAnswerBytes = 8192;

// Whether an extracted answer matches the ground truth: equal in Hendrycks' MATH normal form
// (strip_math_answer), or equivalent in the looser form (normalize_math_answer, then
// normalized_answers_equivalent: tuples element-wise, symbolically through GiNaC).
bool grade_math_answer(const std::string& given_answer, const std::string& ground_truth);

// 1.0 when the last \boxed{} (or \fbox{}) of `response` matches `label`, else 0.0. A label
// with a \boxed{} is graded against its boxed content; an empty label, a response without a
// box, or a label whose box does not close scores 0.
double math_reward(const std::string& response, const std::string& label);

}  // namespace ooze::rollout
