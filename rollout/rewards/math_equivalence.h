// Whether two math answers are the same, beyond string equality: symbolically through GiNaC, and
// element-wise for tuples and intervals, with the rules of Slime's sympy-based grading.
//
// Thread-safe: GiNaC's reference counts are not atomic, so every symbolic check holds one
// process-wide lock (string comparisons before it do not).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ooze::rollout {

// Bounds that keep a check fast on any input: longer expressions, higher polynomial degrees,
// more distinct variables, or integer powers of numbers with more bits than these are "not
// equal" without being expanded.
constexpr size_t kMaxSymbolicExpressionBytes = 512;
constexpr int kMaxSymbolicDegree = 32;
constexpr int kMaxSymbolicVariables = 4;
constexpr int kMaxSymbolicPowerBits = 20000;

// Whether `a` and `b` are one expression in the same value: numbers (decimals are exact, so
// 0.5 == 1/2 but 0.33 != 1/3), + - * / ^ (or **), implicit multiplication (2x, 2(x+1), x y),
// parentheses, sqrt / sin / cos / tan / log / ln / exp and their inverses (sin^2 x too), pi,
// e (Euler's number), other single letters as variables (x_1 subscripts too), Unicode π √ ∞ · × ÷
// −, and LaTeX (\frac, \sqrt[n], \cdot, \times, \pi, ..., through rollout/rewards/latex_to_text.h).
// Equal when (a - b).normal() is 0, or when a - b is numerically 0 (relative 1e-20 at 30 digits):
// as a constant, or at three fixed points of its variables (identities normal() cannot see, such as
// sin^2 + cos^2 = 1). False for anything it cannot parse, digits outside ASCII (４) included, as
// Python's parser rejects them; never throws.
bool symbolically_equal(const std::string& a, const std::string& b);

// Slime's tuple split: "(1, 2)" and "[1, 3)" -> their trimmed elements (brackets nested inside
// elements allowed); anything else -> itself as one element. Thousands separators go first.
std::vector<std::string> split_tuple(const std::string& answer);

// Slime's sympy grading on two answers already in the looser normal form
// (normalize_math_answer): equal strings; else a tuple or interval matches only with the same
// opening and closing brackets and as many elements, each pair equal as strings, or neither a
// fraction "a/b" (unreduced fractions are not accepted) and both or neither integers (an
// integer answer must be given as one) and symbolically equal.
bool normalized_answers_equivalent(const std::string& given, const std::string& truth);

}  // namespace ooze::rollout
