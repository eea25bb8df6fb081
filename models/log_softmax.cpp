#include "models/log_softmax.h"

namespace ooze::models {

at::Tensor log_sum_exp_shifted(const at::Tensor& logits, const at::Tensor& max) {
  return (logits - max.unsqueeze(-1))
      .exp()
      .sum(-1, /*keepdim=*/false, at::kDouble)
      .log()
      .to(logits.scalar_type());
}

at::Tensor log_softmax_fp64_sum(const at::Tensor& logits) {
  // Any shift gives the same value; the row's maximum keeps exp() from overflowing.
  const at::Tensor max = std::get<0>(logits.max(-1)).detach();
  return (logits - max.unsqueeze(-1)) - log_sum_exp_shifted(logits, max).unsqueeze(-1);
}

}  // namespace ooze::models
