// The final answer a math response marks with \boxed{...}, as Slime's graders find it.
#pragma once

#include <optional>
#include <string>

namespace ooze::rollout {

// The content of the last \boxed{...} in `text`, nested braces included (\boxed{\frac{1}{2}}
// gives \frac{1}{2}); when `text` has no \boxed at all, the last \fbox{...}. Also takes the
// brace-less form "\boxed 5", whose answer runs to the next '$' or line end. nullopt when there
// is no box, when the last one is neither form, or when its braces never close.
std::optional<std::string> last_boxed_content(const std::string& text);

}  // namespace ooze::rollout
