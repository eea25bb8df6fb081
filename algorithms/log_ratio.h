// Log-ratios (log pi - log pi_other) made safe to exponentiate. Real ones are small; a diverged
// token (e.g. -1000) would overflow exp() and poison the loss with Inf and NaN gradients. So the
// value is clamped to [-20, 20] while the gradient passes straight through (the gradient at the
// bound, finite, instead of at::clamp's 0): a forward of three products, and no where() in the
// backward, which LibTorch 1.13 runs many times slower than a product on the CPU.
#pragma once

#include <ATen/ATen.h>

namespace ooze::algorithms {

constexpr double kMaxLogRatio = 20.0;

// clamp(log_ratio, -kMaxLogRatio, kMaxLogRatio) in value; d/d log_ratio = 1.
at::Tensor bounded_log_ratio(const at::Tensor& log_ratio);

}  // namespace ooze::algorithms
