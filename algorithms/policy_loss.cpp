#include "algorithms/policy_loss.h"

#include <sstream>

#include "algorithms/log_ratio.h"
#include "algorithms/opsm.h"
#include "core/error.h"

namespace ooze::algorithms {
namespace {

at::Tensor safe_ratio(const at::Tensor& log_ratio) { return bounded_log_ratio(log_ratio).exp(); }

}  // namespace

PolicyLossKind policy_loss_kind_for(AdvantageEstimator estimator) {
  if (estimator == AdvantageEstimator::kGspo) return PolicyLossKind::kGspo;
  if (estimator == AdvantageEstimator::kCispo) return PolicyLossKind::kCispo;
  return PolicyLossKind::kPpoClip;
}

const OptionFields<PolicyLossOptions>& PolicyLossOptions::fields() {
  using O = PolicyLossOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.add_internal_enum("kind", &O::kind);
    f.add("use_kl_loss", &O::use_kl_loss, "Add KL(policy || reference) to the loss (GRPO).");
    f.add("kl_loss_coef", &O::kl_loss_coef, "Coefficient of the KL loss.").min(0);
    f.add_enum("kl_loss_type", &O::kl_loss_type,
               {KlEstimator::kK1, KlEstimator::kK2, KlEstimator::kK3, KlEstimator::kLowVarKl},
               kl_estimator_name, "KL estimator of the KL loss and of the kl_coef reward penalty.");
    f.add("use_unbiased_kl", &O::use_unbiased_kl,
          "Weight the KL loss by the current/old policy ratio (unbiased KL).");
    f.add("eps_clip", &O::eps_clip, "PPO clip: the ratio's lower bound is 1 - eps_clip.")
        .greater_than(0);
    f.add("eps_clip_high", &O::eps_clip_high,
          "PPO clip: the ratio's upper bound is 1 + eps_clip_high (DAPO's clip-higher); 0 means "
          "eps_clip.")
        .min(0);
    f.add("eps_clip_c", &O::eps_clip_c,
          "Dual-clip PPO bound (> 1) on the loss of negative advantages; 0 turns it off.")
        .min(0);
    f.add("entropy_coef", &O::entropy_coef, "Entropy bonus coefficient.").min(0);
    f.include("mismatch", &O::mismatch, MismatchCorrectionOptions::fields());
    f.add("use_opsm", &O::use_opsm,
          "Off-policy sequence masking: drop negative-advantage samples whose policy drifted by "
          "more than opsm_delta.");
    f.add("opsm_delta", &O::opsm_delta, "OPSM threshold on the mean old/current log-ratio.").min(0);
    return f;
  }();
  return fields;
}

void PolicyLossOptions::validate() const {
  if (eps_clip_c != 0 && !(eps_clip_c > 1.0)) {
    std::ostringstream message;  // shortest form of the number, as the user typed it
    message << "eps_clip_c = " << eps_clip_c
            << " must be > 1 (dual-clip caps the loss at -eps_clip_c * advantage), or 0 to turn "
               "dual clip off";
    throw ConfigError(message.str());
  }
  mismatch.validate();
}

PerTokenPolicyLoss ppo_clip_loss(const at::Tensor& log_ratio, const at::Tensor& advantages,
                                 double eps_clip, double eps_clip_high, double eps_clip_c) {
  // max(-r A, -clamp(r) A) and its dual-clip cap, written as "take the other branch where it is
  // larger" with masks: the same values and gradients (a clipped branch is constant in r where
  // it is chosen), without the slow where() of maximum's backward on the CPU.
  at::Tensor ratio = safe_ratio(log_ratio);
  const at::ScalarType dtype = ratio.scalar_type();
  at::Tensor unclipped = -ratio * advantages;
  at::Tensor clipped, chose_clipped;
  {
    at::NoGradGuard no_grad;
    clipped = -at::clamp(ratio, 1.0 - eps_clip, 1.0 + eps_clip_high) * advantages;
    chose_clipped = (clipped > unclipped).to(dtype);
  }
  PerTokenPolicyLoss out;
  out.loss = unclipped + chose_clipped * (clipped - unclipped);
  out.clipped = chose_clipped;
  if (eps_clip_c != 0) {
    // Dual clip: for A < 0 an exploding ratio would make the loss unbounded; cap it at -c A.
    at::Tensor capped;
    at::Tensor cap = -eps_clip_c * advantages;
    {
      at::NoGradGuard no_grad;
      capped = ((advantages < 0) & (out.loss > cap)).to(dtype);
    }
    out.loss = out.loss + capped * (cap - out.loss);
  }
  return out;
}

at::Tensor gspo_sequence_log_ratio(const at::Tensor& log_probs, const at::Tensor& old_log_probs,
                                   const at::Tensor& loss_mask, const PackedSequences& sequences) {
  return sequences.expand(sequences.masked_mean(log_probs - old_log_probs, loss_mask));
}

PerTokenPolicyLoss cispo_loss(const at::Tensor& log_probs, const at::Tensor& old_log_probs,
                              const at::Tensor& advantages, double eps_clip, double eps_clip_high) {
  at::Tensor ratio = safe_ratio(log_probs.detach() - old_log_probs);
  at::Tensor weight = at::clamp(ratio, 1.0 - eps_clip, 1.0 + eps_clip_high);
  PerTokenPolicyLoss out;
  // The clipped ratio is a constant: the gradient flows through log pi only, so clipped tokens
  // still contribute (unlike PPO, which zeroes them).
  out.loss = -weight * advantages * log_probs;
  out.clipped = (weight != ratio).to(ratio.scalar_type());
  return out;
}

LossOutput policy_loss(const PolicyLossInputs& inputs, const PolicyLossOptions& options,
                       const LossScale& scale) {
  options.validate();
  if (!inputs.log_probs.defined()) throw Error("policy_loss: log_probs is required");
  const int64_t tokens = inputs.log_probs.numel();
  check_per_token("policy_loss", "log_probs", inputs.log_probs, tokens);
  check_per_token("policy_loss", "old_log_probs", inputs.old_log_probs, tokens);
  check_per_token("policy_loss", "advantages", inputs.advantages, tokens);
  check_per_token("policy_loss", "loss_mask", inputs.loss_mask, tokens);
  if (options.use_kl_loss) {
    check_per_token("policy_loss (use_kl_loss)", "ref_log_probs", inputs.ref_log_probs, tokens);
  }
  if (options.mismatch.needs_rollout_log_probs()) {
    check_per_token("policy_loss (use_tis or get_mismatch_metrics)", "rollout_log_probs",
                    inputs.rollout_log_probs, tokens);
  }
  if (options.entropy_coef != 0) {
    check_per_token("policy_loss (entropy_coef != 0)", "entropy", inputs.entropy, tokens);
  } else if (inputs.entropy.defined()) {
    check_per_token("policy_loss", "entropy", inputs.entropy, tokens);
  }

  PackedSequences sequences(inputs.cu_seqlens, tokens, inputs.log_probs.device());
  at::Tensor log_probs = to_compute_dtype(inputs.log_probs);
  const at::ScalarType dtype = log_probs.scalar_type();
  at::Tensor old_log_probs = inputs.old_log_probs.to(dtype);
  at::Tensor advantages = inputs.advantages.to(dtype);
  at::Tensor mask = inputs.loss_mask.to(dtype);
  at::Tensor weights = loss_token_weights(mask, sequences, scale, inputs.sequence_token_counts);
  PendingMetrics metrics;

  PerTokenPolicyLoss surrogate;
  at::Tensor log_ratio;  // log pi - log pi_old, per token or per sequence
  switch (options.kind) {
    case PolicyLossKind::kPpoClip:
      log_ratio = log_probs - old_log_probs;
      surrogate = ppo_clip_loss(log_ratio, advantages, options.eps_clip, options.clip_high(),
                                options.eps_clip_c);
      break;
    case PolicyLossKind::kGspo:
      log_ratio = gspo_sequence_log_ratio(log_probs, old_log_probs, mask, sequences);
      surrogate = ppo_clip_loss(log_ratio, advantages, options.eps_clip, options.clip_high(),
                                options.eps_clip_c);
      break;
    case PolicyLossKind::kCispo:
      log_ratio = log_probs - old_log_probs;
      surrogate =
          cispo_loss(log_probs, old_log_probs, advantages, options.eps_clip, options.clip_high());
      break;
  }
  at::Tensor per_token = surrogate.loss;

  if (options.use_opsm) {
    at::Tensor keep =
        opsm_keep_mask(log_probs, old_log_probs, advantages, mask, sequences, options.opsm_delta);
    per_token = per_token * keep;
    metrics.add("opsm_clipfrac", ((1.0 - keep) * weights).sum());
  }
  // What pg_loss counts: the loss mask, unless a custom TIS function rejects tokens.
  at::Tensor pg_mask = mask;
  at::Tensor pg_weights = weights;
  if (options.mismatch.uses_custom_tis()) {
    if (!inputs.custom_tis || inputs.sequence_token_counts.defined()) {
      throw Error("policy_loss: custom_tis_function_path " +
                  options.mismatch.custom_tis_function_path +
                  " needs inputs.custom_tis, on whole samples (no sequence_token_counts)");
    }
    CustomTisResult tis =
        inputs.custom_tis(per_token, old_log_probs, inputs.rollout_log_probs.to(dtype), mask);
    per_token = tis.per_token.to(dtype);
    pg_mask = tis.loss_mask.to(dtype);
    pg_weights = loss_token_weights(pg_mask, sequences, scale);
    for (const auto& [name, values] : tis.metrics) {
      metrics.add(name, (values.detach().to(dtype) * weights).sum());
    }
  } else if (options.mismatch.needs_rollout_log_probs()) {
    RolloutImportanceWeights importance = rollout_importance_weights(
        old_log_probs, inputs.rollout_log_probs, mask, sequences, options.mismatch);
    if (options.mismatch.use_tis) per_token = per_token * importance.weights;
    add_mismatch_metrics(metrics, importance, old_log_probs, inputs.rollout_log_probs, mask,
                         weights);
  }

  at::Tensor pg_loss = inputs.pg_loss_reducer ? inputs.pg_loss_reducer(per_token, pg_mask)
                                              : (per_token * pg_weights).sum();
  at::Tensor loss = pg_loss;
  metrics.add("pg_loss", pg_loss);
  metrics.add("pg_clipfrac", (surrogate.clipped * weights).sum());
  metrics.add("ppo_kl", (-log_ratio.detach() * weights).sum());

  if (inputs.entropy.defined()) {
    at::Tensor entropy_loss = (inputs.entropy.to(dtype) * weights).sum();
    metrics.add("entropy_loss", entropy_loss);
    if (options.entropy_coef != 0) loss = loss - options.entropy_coef * entropy_loss;
  }
  if (options.use_kl_loss) {
    // With a zero coefficient the KL is only a metric: keep it out of the autograd graph.
    const bool with_gradient = options.kl_loss_coef != 0;
    at::Tensor current = with_gradient ? log_probs : log_probs.detach();
    at::Tensor importance_ratio;
    if (options.use_unbiased_kl) importance_ratio = safe_ratio(current - old_log_probs);
    at::Tensor kl =
        approx_kl(current, inputs.ref_log_probs.to(dtype), options.kl_loss_type, importance_ratio);
    at::Tensor kl_loss = (kl * weights).sum();
    metrics.add("kl_loss", kl_loss);
    if (with_gradient) loss = loss + options.kl_loss_coef * kl_loss;
  }
  metrics.add("loss", loss);
  return LossOutput{loss * scale.gradient_factor(), metrics.resolve()};
}

}  // namespace ooze::algorithms
