// How per-token loss terms become one scalar, normalised by the whole training step.
//
// The objective of a step is J = sum over every response token t of the step (all DP ranks, all
// micro-batches) of x_t * w_t, with
//   token-mean           w_t = m_t / N_tokens
//   seq-mean-token-mean  w_t = m_t / (n_s(t) * N_sequences)   (the default, Slime's)
//   seq-mean-token-sum   w_t = m_t / N_sequences              (Dr.GRPO)
// where m_t is the loss mask, n_s the response tokens of the token's sample, N_tokens the step's
// response tokens and N_sequences the step's samples. N_tokens and N_sequences are GLOBAL: the
// trainer all-reduces them over the DP group before the first micro-batch.
//
// Contract with the trainer: each micro-batch loss is gradient_factor() * sum_t x_t w_t over its
// tokens, with gradient_factor() = dp_size * cp_size. The trainer sums the gradients of its
// micro-batches (plain accumulation, no division by their number) and the gradients are then
// AVERAGED over the dp_size * cp_size ranks, as FSDP's reduce-scatter does. The result is the
// gradient of J whatever the number of ranks or micro-batches. With context parallelism a sample's
// tokens are spread over CP ranks: pass each sample's full response-token count as
// `sequence_token_counts`.
//
// Metrics are reported as sum_t x_t w_t without the factor: their sum over micro-batches and
// ranks is the step's value (see loss_metrics.h).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "algorithms/packed_sequences.h"
#include "core/option_fields.h"

namespace ooze::algorithms {

enum class LossAggregation { kTokenMean, kSequenceMeanTokenMean, kSequenceMeanTokenSum };

// "token-mean", "seq-mean-token-mean", "seq-mean-token-sum" (verl's names).
std::string loss_aggregation_name(LossAggregation aggregation);

// --loss-aggregation, which every loss the trainer computes follows, as the flag of `member`.
template <class Options>
FieldSpec& add_loss_aggregation_field(OptionFields<Options>& fields,
                                      LossAggregation Options::*member) {
  return fields.add_enum(
      "loss_aggregation", member,
      {LossAggregation::kTokenMean, LossAggregation::kSequenceMeanTokenMean,
       LossAggregation::kSequenceMeanTokenSum},
      loss_aggregation_name,
      "Loss normalisation over the step: per token, mean of per-sample means (Slime's default), "
      "or mean of per-sample sums (Dr.GRPO).");
}

struct LossScale {
  LossAggregation aggregation = LossAggregation::kSequenceMeanTokenMean;
  double global_tokens = 0;     // sum of loss_mask over the whole step, all DP ranks
  double global_sequences = 0;  // samples in the whole step, all DP ranks (empty responses too)
  int64_t dp_size = 1;          // ranks the gradients are averaged over ...
  int64_t cp_size = 1;          // ... times the context-parallel ranks of each sample

  double gradient_factor() const { return static_cast<double>(dp_size * cp_size); }
  // Throws ooze::Error on sizes < 1, negative counts, or fewer global sequences than the
  // micro-batch holds.
  void validate(int64_t micro_batch_sequences) const;
};

// w_t [T] (see above) in the dtype of loss_mask (at least fp32), without gradient.
// `sequence_token_counts` [B], optional: each sample's response tokens over all CP ranks;
// undefined means the sums of loss_mask per sample of this micro-batch.
at::Tensor loss_token_weights(const at::Tensor& loss_mask, const PackedSequences& sequences,
                              const LossScale& scale,
                              const at::Tensor& sequence_token_counts = at::Tensor());

}  // namespace ooze::algorithms
