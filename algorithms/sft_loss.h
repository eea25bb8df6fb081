// The supervised fine-tuning loss of one packed micro-batch: the negative log-likelihood of the
// response tokens that count, aggregated over the step like every other loss (loss_aggregation.h),
// so neither the number of data-parallel ranks nor the micro-batch split changes the gradient.
//
//   LossOutput out = sft_loss({cu_seqlens, loss_mask, log_probs}, scale);
//   model.backward(out.loss);   // out.metrics: "loss", the micro-batch's share of the step's NLL
#pragma once

#include <ATen/ATen.h>

#include "algorithms/loss_aggregation.h"
#include "algorithms/loss_metrics.h"

namespace ooze::algorithms {

// One packed micro-batch (packed_sequences.h). Every tensor is [T] except cu_seqlens.
struct SftLossInputs {
  at::Tensor cu_seqlens;  // int32 [B + 1]
  at::Tensor loss_mask;   // 1 on response tokens that count
  at::Tensor log_probs;   // log p(token t | earlier tokens of its sample); carries the gradient
  // Optional [B]: each sample's response tokens over all CP ranks (loss_aggregation.h).
  at::Tensor sequence_token_counts;
};

// Throws ooze::Error on a missing or misshapen input.
LossOutput sft_loss(const SftLossInputs& inputs, const LossScale& scale);

}  // namespace ooze::algorithms
