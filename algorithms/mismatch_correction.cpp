#include "algorithms/mismatch_correction.h"

#include <sstream>

#include "algorithms/log_ratio.h"
#include "core/error.h"

namespace ooze::algorithms {
std::string tis_level_name(TisLevel level) {
  switch (level) {
    case TisLevel::kToken:
      return "token";
    case TisLevel::kSequence:
      return "sequence";
    case TisLevel::kGeometric:
      return "geometric";
  }
  return "?";
}

std::string tis_mode_name(TisMode mode) { return mode == TisMode::kClip ? "clip" : "mask"; }

const OptionFields<MismatchCorrectionOptions>& MismatchCorrectionOptions::fields() {
  using O = MismatchCorrectionOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.add("use_tis", &O::use_tis,
          "Weight the policy loss by the train/inference importance ratio (TIS).");
    f.add("tis_clip", &O::tis_clip, "Upper bound of the TIS ratio.").greater_than(0);
    f.add("tis_clip_low", &O::tis_clip_low, "Lower bound of the TIS ratio.").min(0);
    f.add_enum("tis_level", &O::level,
               {TisLevel::kToken, TisLevel::kSequence, TisLevel::kGeometric}, tis_level_name,
               "TIS ratio per token, per sequence (product), or per sequence geometric mean.");
    f.add_enum("tis_mode", &O::mode, {TisMode::kClip, TisMode::kMask}, tis_mode_name,
               "Ratios outside the TIS bounds are clipped (truncated IS) or masked (icepop).");
    f.add("get_mismatch_metrics", &O::get_mismatch_metrics,
          "Log train/inference log-prob mismatch metrics without --use-tis.");
    f.add("custom_tis_function_path", &O::custom_tis_function_path,
          "With --use-tis: your function in place of the built-in TIS, (args, *, pg_loss, "
          "train_log_probs, rollout_log_probs, loss_masks, total_lengths, response_lengths) -> "
          "(pg_loss, loss_masks, metrics) as Slime's; see docs/custom_loss.md.");
    f.add_rule([](const O& options) { options.validate(); });
    return f;
  }();
  return fields;
}

void MismatchCorrectionOptions::validate() const {
  if (!use_tis && !custom_tis_function_path.empty()) {
    throw ConfigError("--custom-tis-function-path " + custom_tis_function_path +
                      " replaces the built-in TIS: it is used with --use-tis only (add it)");
  }
  if (tis_clip_low < tis_clip) return;
  std::ostringstream message;  // shortest form of the numbers, as the user typed them
  message << "tis_clip_low = " << tis_clip_low << " must be below tis_clip = " << tis_clip;
  throw ConfigError(message.str());
}

RolloutImportanceWeights rollout_importance_weights(const at::Tensor& old_log_probs,
                                                    const at::Tensor& rollout_log_probs,
                                                    const at::Tensor& loss_mask,
                                                    const PackedSequences& sequences,
                                                    const MismatchCorrectionOptions& options) {
  const int64_t tokens = sequences.num_tokens();
  check_per_token("rollout_importance_weights", "old_log_probs", old_log_probs, tokens);
  check_per_token("rollout_importance_weights", "rollout_log_probs", rollout_log_probs, tokens);
  check_per_token("rollout_importance_weights", "loss_mask", loss_mask, tokens);
  options.validate();
  at::NoGradGuard no_grad;
  at::Tensor old = to_compute_dtype(old_log_probs);
  at::Tensor mask = loss_mask.to(old.scalar_type());
  at::Tensor log_ratio = old - rollout_log_probs.to(old.scalar_type());
  switch (options.level) {
    case TisLevel::kToken:
      break;
    case TisLevel::kSequence:
      log_ratio = sequences.expand(sequences.sum(log_ratio * mask));
      break;
    case TisLevel::kGeometric:
      log_ratio = sequences.expand(sequences.masked_mean(log_ratio, mask));
      break;
  }
  RolloutImportanceWeights out;
  out.ratio = at::clamp(log_ratio, -kMaxLogRatio, kMaxLogRatio).exp();
  at::Tensor inside = (out.ratio >= options.tis_clip_low) & (out.ratio <= options.tis_clip);
  at::Tensor kept = inside.to(old.scalar_type());
  out.corrected = 1.0 - kept;
  if (options.mode == TisMode::kClip) {
    out.weights = at::clamp(out.ratio, options.tis_clip_low, options.tis_clip);
  } else {
    out.weights = out.ratio * kept;
  }
  return out;
}

void add_mismatch_metrics(PendingMetrics& metrics, const RolloutImportanceWeights& weights,
                          const at::Tensor& old_log_probs, const at::Tensor& rollout_log_probs,
                          const at::Tensor& loss_mask, const at::Tensor& metric_weights) {
  using Reduction = LossMetrics::Reduction;
  at::NoGradGuard no_grad;
  at::Tensor old = to_compute_dtype(old_log_probs);
  at::Tensor difference = old - rollout_log_probs.to(old.scalar_type());
  at::Tensor mask = loss_mask.to(old.scalar_type());
  // Extremes over counted tokens by products with the mask (where() is slow on the CPU): the
  // values are positive, so an uncounted token contributes 0 to a maximum; the minimum ratio is
  // the reciprocal of the maximum reciprocal (+inf when no token counts).
  auto masked_max = [&](const at::Tensor& positive) {
    if (positive.numel() == 0) return at::zeros({}, positive.options());
    return (positive * mask).max();
  };
  at::Tensor abs_difference = difference.abs();
  at::Tensor clamped = at::clamp(difference, -kMaxLogRatio, kMaxLogRatio);
  metrics.add("train_rollout_logprob_abs_diff", (abs_difference * metric_weights).sum());
  metrics.add("train_rollout_logprob_abs_diff_max", masked_max(abs_difference), Reduction::kMax);
  metrics.add("train_rollout_k3_kl", ((clamped.exp() - 1.0 - clamped) * metric_weights).sum());
  metrics.add("tis", (weights.ratio * metric_weights).sum());
  metrics.add("tis_abs", ((weights.ratio - 1.0).abs() * metric_weights).sum());
  metrics.add("tis_max", masked_max(weights.ratio), Reduction::kMax);
  metrics.add("tis_min", at::reciprocal(masked_max(at::reciprocal(weights.ratio))),
              Reduction::kMin);
  metrics.add("tis_clipfrac", (weights.corrected * metric_weights).sum());
}

}  // namespace ooze::algorithms
