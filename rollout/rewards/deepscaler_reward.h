// --rm-type deepscaler: DeepScaleR's rule, which grades only the answer after the reasoning.
#pragma once

#include <string>

namespace ooze::rollout {

// The solution is what follows the last "</think>" (or, without one, what lies between the
// first and second "###Response"); no marker scores 0, as does a solution without \boxed{} or
// an empty label. A label holding \boxed{} or \fbox{} is graded against its box. 1.0 when the
// boxed answer matches by grade_math_answer, else 0.0.
double deepscaler_reward(const std::string& response, const std::string& label);

}  // namespace ooze::rollout
