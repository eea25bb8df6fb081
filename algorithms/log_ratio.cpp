#include "algorithms/log_ratio.h"

namespace ooze::algorithms {

at::Tensor bounded_log_ratio(const at::Tensor& log_ratio) {
  at::Tensor overshoot;
  {
    at::NoGradGuard no_grad;
    overshoot = at::clamp(log_ratio, -kMaxLogRatio, kMaxLogRatio) - log_ratio;
  }
  return log_ratio + overshoot;
}

}  // namespace ooze::algorithms
