// Distillation over the whole vocabulary: the student's distribution at each response token of
// its own rollout is pulled towards a teacher's at the same token. Two teachers use it:
//   --opd-type self (OPSD)              the frozen initial policy, scoring the same response after
//                                       privileged information (a reference solution, the answer)
//                                       that the student never sees;
//   --opd-type trainer --opd-full-vocab  the trainer's frozen teacher model on the same context
//                                       (GKD, on-policy distillation of language models).
// The divergence is GKD's generalized Jensen-Shannon, with the teacher's weight beta in the
// mixture
//
//   M      = beta * p_T + (1 - beta) * p_S
//   JSD_b  = beta * KL(p_T || M) + (1 - beta) * KL(p_S || M)
//
// which vanishes at beta = 0 and 1; there it is taken as its limit up to the factor beta (or
// 1 - beta): beta = 0 is the forward KL(p_T || p_S), beta = 1 the reverse KL(p_S || p_T), so the
// flag moves from mode covering to mode seeking. Each token's value may be capped at
// --opsd-jsd-clip: a token above the cap adds the cap and no gradient, so a few tokens where the
// teacher is sure of something the student cannot know do not drown the others.
//
//   at::Tensor per_token = generalized_jsd(student_log_probs, teacher_log_probs, 0.5);   // [N]
//   LossOutput out = vocabulary_distillation_loss(inputs, opd, scale);  // coef * JSD, aggregated
#pragma once

#include <ATen/ATen.h>

#include "algorithms/loss_aggregation.h"
#include "algorithms/loss_metrics.h"
#include "algorithms/on_policy_distillation.h"

namespace ooze::algorithms {

// JSD_beta between the rows of two [N, V] log-probability tensors (log-softmax outputs, any
// floating dtype, computed in at least fp32): [N]. Differentiable in both. Throws ooze::Error on
// shapes that differ or a beta outside [0, 1].
at::Tensor generalized_jsd(const at::Tensor& student_log_probs, const at::Tensor& teacher_log_probs,
                           double beta);

struct VocabularyDistillationInputs {
  at::Tensor cu_seqlens;  // int32 [B + 1] of the packed micro-batch
  at::Tensor loss_mask;   // [T]: 1 on the response tokens that count
  // int64 [N]: the packed index of every response token of the micro-batch, and for each the
  // student's and the teacher's log-probabilities over the vocabulary there, [N, V].
  at::Tensor response_tokens;
  at::Tensor student_log_probs;
  at::Tensor teacher_log_probs;
};

// opd.kl_coef * the per-token JSD (capped at opd.opsd_jsd_clip when it is > 0), aggregated over
// the step like every per-token loss (loss_aggregation.h), the gradient reaching the student
// only. Metrics: "opd_jsd" (the JSD, before the cap and the coefficient) and "loss" (what the
// term adds to the step's loss). Throws ooze::Error on inputs of other shapes.
LossOutput vocabulary_distillation_loss(const VocabularyDistillationInputs& inputs,
                                        const OpdOptions& opd, const LossScale& scale);

}  // namespace ooze::algorithms
