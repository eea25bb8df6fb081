// Off-policy sequence masking (OPSM, --use-opsm --opsm-delta), as Slime defines it: a sample whose
// tokens were sampled by a policy that has drifted (mean over its counted tokens of
// log pi_old - log pi_theta above delta) and that was bad (negative advantage) is dropped from the
// policy-gradient loss, token by token where the advantage is negative. Positive samples are kept:
// pushing up a good sample stays safe however stale it is.
#pragma once

#include <ATen/ATen.h>

#include "algorithms/packed_sequences.h"

namespace ooze::algorithms {

// [T] detached: 0 where advantages < 0 and the token's sample has mean (old - current) log-ratio
// > delta, else 1. Multiply the per-token policy-gradient loss by it.
at::Tensor opsm_keep_mask(const at::Tensor& log_probs, const at::Tensor& old_log_probs,
                          const at::Tensor& advantages, const at::Tensor& loss_mask,
                          const PackedSequences& sequences, double delta);

}  // namespace ooze::algorithms
