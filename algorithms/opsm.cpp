#include "algorithms/opsm.h"

namespace ooze::algorithms {

at::Tensor opsm_keep_mask(const at::Tensor& log_probs, const at::Tensor& old_log_probs,
                          const at::Tensor& advantages, const at::Tensor& loss_mask,
                          const PackedSequences& sequences, double delta) {
  const int64_t tokens = sequences.num_tokens();
  check_per_token("opsm_keep_mask", "log_probs", log_probs, tokens);
  check_per_token("opsm_keep_mask", "old_log_probs", old_log_probs, tokens);
  check_per_token("opsm_keep_mask", "advantages", advantages, tokens);
  check_per_token("opsm_keep_mask", "loss_mask", loss_mask, tokens);
  at::NoGradGuard no_grad;
  at::Tensor current = to_compute_dtype(log_probs.detach());
  at::Tensor drift = to_compute_dtype(old_log_probs).to(current.scalar_type()) - current;
  at::Tensor sequence_drift =
      sequences.expand(sequences.masked_mean(drift, loss_mask.to(current.scalar_type())));
  at::Tensor dropped = (advantages < 0) & (sequence_drift > delta);
  return 1.0 - dropped.to(current.scalar_type());
}

}  // namespace ooze::algorithms
