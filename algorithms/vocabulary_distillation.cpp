#include "algorithms/vocabulary_distillation.h"

#include <cmath>
#include <sstream>

#include "algorithms/packed_sequences.h"
#include "core/error.h"

namespace ooze::algorithms {
namespace {

// KL(p || q) of each row, from log-probabilities.
at::Tensor kl_rows(const at::Tensor& log_p, const at::Tensor& log_q) {
  return (log_p.exp() * (log_p - log_q)).sum(-1);
}

}  // namespace

at::Tensor generalized_jsd(const at::Tensor& student_log_probs, const at::Tensor& teacher_log_probs,
                           double beta) {
  if (student_log_probs.dim() != 2 || student_log_probs.sizes() != teacher_log_probs.sizes()) {
    std::ostringstream message;
    message << "generalized_jsd: the student's log-probs are " << student_log_probs.sizes()
            << " and the teacher's " << teacher_log_probs.sizes()
            << ": both must be [tokens, vocabulary]";
    throw Error(message.str());
  }
  if (!(beta >= 0.0 && beta <= 1.0)) {
    throw Error("generalized_jsd: beta = " + std::to_string(beta) + " is outside [0, 1]");
  }
  const at::Tensor student = to_compute_dtype(student_log_probs);
  const at::Tensor teacher = to_compute_dtype(teacher_log_probs).to(student.scalar_type());
  if (beta == 0.0) return kl_rows(teacher, student);
  if (beta == 1.0) return kl_rows(student, teacher);
  // log M in log space, so that tokens one side deems impossible stay finite.
  const at::Tensor log_mixture =
      at::logsumexp(at::stack({student + std::log1p(-beta), teacher + std::log(beta)}), 0);
  return beta * kl_rows(teacher, log_mixture) + (1.0 - beta) * kl_rows(student, log_mixture);
}

LossOutput vocabulary_distillation_loss(const VocabularyDistillationInputs& inputs,
                                        const OpdOptions& opd, const LossScale& scale) {
  const int64_t tokens = inputs.loss_mask.numel();
  check_per_token("vocabulary_distillation_loss", "loss_mask", inputs.loss_mask, tokens);
  const int64_t rows = inputs.response_tokens.numel();
  if (inputs.student_log_probs.size(0) != rows) {
    throw Error("vocabulary_distillation_loss: " + std::to_string(rows) +
                " response tokens but vocabulary log-probs for " +
                std::to_string(inputs.student_log_probs.size(0)));
  }
  const at::Tensor jsd =
      generalized_jsd(inputs.student_log_probs, inputs.teacher_log_probs, opd.opsd_beta);
  const at::Tensor capped = opd.opsd_jsd_clip > 0 ? at::clamp_max(jsd, opd.opsd_jsd_clip) : jsd;
  // Back onto the packed tokens, 0 on the prompt's, to be weighed as every per-token loss is.
  at::Tensor per_token = at::zeros({tokens}, capped.options());
  per_token = per_token.index_put({inputs.response_tokens}, capped);
  at::Tensor jsd_per_token = at::zeros({tokens}, jsd.options());
  jsd_per_token = jsd_per_token.index_put({inputs.response_tokens}, jsd.detach());

  PackedSequences sequences(inputs.cu_seqlens, tokens, per_token.device());
  const at::Tensor weights =
      loss_token_weights(inputs.loss_mask.to(per_token.scalar_type()), sequences, scale);
  const at::Tensor loss = opd.kl_coef * (per_token * weights).sum();
  PendingMetrics metrics;
  metrics.add("opd_jsd", (jsd_per_token * weights).sum());
  metrics.add("loss", loss);
  return LossOutput{loss * scale.gradient_factor(), metrics.resolve()};
}

}  // namespace ooze::algorithms
