#include "algorithms/loss_aggregation.h"

#include <algorithm>

#include "core/error.h"

namespace ooze::algorithms {

std::string loss_aggregation_name(LossAggregation aggregation) {
  switch (aggregation) {
    case LossAggregation::kTokenMean:
      return "token-mean";
    case LossAggregation::kSequenceMeanTokenMean:
      return "seq-mean-token-mean";
    case LossAggregation::kSequenceMeanTokenSum:
      return "seq-mean-token-sum";
  }
  return "?";
}

void LossScale::validate(int64_t micro_batch_sequences) const {
  if (dp_size < 1 || cp_size < 1) {
    throw Error("LossScale: dp_size and cp_size must be >= 1, got dp_size = " +
                std::to_string(dp_size) + ", cp_size = " + std::to_string(cp_size));
  }
  if (global_tokens < 0 || global_sequences < 0) {
    throw Error("LossScale: global_tokens and global_sequences must be >= 0, got " +
                std::to_string(global_tokens) + " and " + std::to_string(global_sequences));
  }
  if (aggregation != LossAggregation::kTokenMean &&
      global_sequences < static_cast<double>(micro_batch_sequences)) {
    throw Error("LossScale: global_sequences = " + std::to_string(global_sequences) +
                " is smaller than this micro-batch's " + std::to_string(micro_batch_sequences) +
                " samples: pass the number of samples of the whole step over all DP ranks");
  }
}

at::Tensor loss_token_weights(const at::Tensor& loss_mask, const PackedSequences& sequences,
                              const LossScale& scale, const at::Tensor& sequence_token_counts) {
  check_per_token("loss_token_weights", "loss_mask", loss_mask, sequences.num_tokens());
  scale.validate(sequences.num_sequences());
  at::NoGradGuard no_grad;
  at::Tensor mask = to_compute_dtype(loss_mask);
  // A step without any response token has an all-zero mask: clamping keeps the weights finite.
  switch (scale.aggregation) {
    case LossAggregation::kTokenMean:
      return mask / std::max(scale.global_tokens, 1.0);
    case LossAggregation::kSequenceMeanTokenSum:
      return mask / std::max(scale.global_sequences, 1.0);
    case LossAggregation::kSequenceMeanTokenMean: {
      at::Tensor counts = sequence_token_counts.defined()
                              ? sequence_token_counts.to(mask.device(), mask.scalar_type())
                              : sequences.sum(mask);
      if (counts.dim() != 1 || counts.numel() != sequences.num_sequences()) {
        throw Error("loss_token_weights: sequence_token_counts must hold one count per sample (" +
                    std::to_string(sequences.num_sequences()) + "), got " +
                    std::to_string(counts.numel()));
      }
      at::Tensor per_sequence =
          at::reciprocal(at::clamp_min(counts, 1.0) * std::max(scale.global_sequences, 1.0));
      return mask * sequences.expand(per_sequence);
    }
  }
  return mask;
}

}  // namespace ooze::algorithms
