#include "algorithms/sft_loss.h"

#include "algorithms/packed_sequences.h"
#include "core/error.h"

namespace ooze::algorithms {

LossOutput sft_loss(const SftLossInputs& inputs, const LossScale& scale) {
  if (!inputs.log_probs.defined()) throw Error("sft_loss: log_probs is required");
  const int64_t tokens = inputs.log_probs.numel();
  check_per_token("sft_loss", "log_probs", inputs.log_probs, tokens);
  check_per_token("sft_loss", "loss_mask", inputs.loss_mask, tokens);
  PackedSequences sequences(inputs.cu_seqlens, tokens, inputs.log_probs.device());
  at::Tensor nll = -to_compute_dtype(inputs.log_probs);
  at::Tensor mask = inputs.loss_mask.to(nll.scalar_type());
  at::Tensor weights = loss_token_weights(mask, sequences, scale, inputs.sequence_token_counts);
  at::Tensor loss = (nll * weights).sum();
  // The logged value is summed in double over the step's micro-batches and ranks: computed here
  // in double too, so a step's loss does not depend on how its tokens were split.
  LossMetrics metrics;
  {
    at::NoGradGuard no_grad;
    at::Tensor mask64 = inputs.loss_mask.to(at::kDouble);
    at::Tensor weights64 =
        loss_token_weights(mask64, sequences, scale, inputs.sequence_token_counts);
    metrics.add("loss", (nll.detach().to(at::kDouble) * weights64).sum().item<double>());
  }
  return LossOutput{loss * scale.gradient_factor(), metrics};
}

}  // namespace ooze::algorithms
