// LaTeX math to the plain notation the symbolic checker and the answer normaliser read:
// \frac{a}{b} -> a/b (each parenthesised unless a number or one character), \sqrt{x} -> sqrt(x),
// \sqrt[n]{x} -> (x)^(1/n), x^{n+1} -> x^(n+1), \pi -> pi, \infty -> inf, \cdot and \times
// -> *, \text{...} and font commands -> their content, \left / \right and spacing dropped,
// Greek letters -> their Unicode characters. Unknown commands are dropped, their arguments kept.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace ooze::rollout {

// Inputs past these limits are not converted (callers keep the text as it was): conversion is
// recursive and answers are short.
constexpr size_t kMaxLatexBytes = 4096;
constexpr int kMaxLatexNesting = 64;

// A leading space precedes every \frac, so that a mixed number "3\frac{1}{2}" reads "3 1/2"
// (the answer normaliser turns digit-space-digit into a sum, as Slime's does). nullopt past
// the limits above.
std::optional<std::string> latex_to_text(const std::string& latex);

}  // namespace ooze::rollout
