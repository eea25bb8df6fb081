// The two normal forms Slime's math graders compare answers in (its math_utils, from Hendrycks'
// MATH and DeepScaleR).
#pragma once

#include <string>

namespace ooze::rollout {

// Hendrycks' MATH normal form (Slime's "mathd" check), LaTeX kept: an enclosing \text{...}
// unwrapped; line breaks, \!, spaces, \left / \right, ^\circ / ^{\circ}, \$ and \% removed;
// \dfrac and \tfrac -> \frac; units after "\text{ " dropped; ".5" -> "0.5"; a short "x = "
// prefix dropped; \sqrt2 -> \sqrt{2}; \frac12 -> \frac{1}{2}; "0.5" -> \frac{1}{2}; "3/4" ->
// \frac{3}{4}. Malformed input (\frac or \sqrt with nothing after it, two "\text{ " units)
// comes back trimmed, as Slime's does when its normaliser raises.
std::string strip_math_answer(const std::string& answer);

// The looser plain-text form the symbolic check reads (Slime's _normalize): \text{} unwrapped,
// $ and % dropped, "or" / "and" -> commas, million / billion / trillion -> *10^k, units
// (degree, cm, meter, mile, second, ..., yard, with plural and ^k) and ^\circ dropped, one
// outer brace pair and ",\!" dropped, integral floats -> integers ("5.0" -> "5"), LaTeX (any
// text with a backslash or a brace) -> plain notation (rollout/rewards/latex_to_text.h), mixed
// numbers "3 1/2" -> "3+1/2", spaces and braces dropped, lower case, "1,000" -> "1000".
std::string normalize_math_answer(const std::string& answer);

// Removes thousands separators: a comma between a digit and exactly three digits that are not
// followed by another digit, repeatedly ("1,000,000" -> "1000000"); "(1,2)" keeps its comma.
// Digits are Unicode decimal digits, as Python's re reads \d ("１,０００" -> "１０００").
std::string strip_thousands_separators(const std::string& text);

// Whether `text` is a number within 1e-7 of an integer once thousands separators are removed
// ("1,000", "12", "3.0", "٣"), and that integer's ASCII digits.
bool is_integer_text(const std::string& text);
std::string integer_digits(const std::string& text);

// Slime's "looks like a fraction a/b" test: [-]digits[any char]/0*nonzero digits[any char].
bool is_fraction_text(const std::string& text);

}  // namespace ooze::rollout
