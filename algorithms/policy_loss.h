// The policy loss of one packed micro-batch, with Slime's options:
//
//   per-token surrogate (by --advantage-estimator)
//     PPO clip (default)  max(-r A, -clamp(r, 1 - eps_clip, 1 + eps_clip_high) A), r = pi / pi_old;
//                         with --eps-clip-c c > 1 and A < 0, further capped at -c A (dual clip)
//     gspo                the same on the sequence ratio r = exp(mean over the sample's counted
//                         tokens of log pi - log pi_old), clipped per sequence
//     cispo               -sg(clamp(r, 1 - eps_clip, 1 + eps_clip_high)) A log pi (MiniMax-M1)
//   x OPSM keep mask (--use-opsm), x rollout importance weights (--use-tis; or a user's TIS
//   function, --custom-tis-function-path, which may also reject tokens from pg_loss)
//   aggregated by loss_aggregation.h
//   - entropy_coef * aggregated entropy
//   + kl_loss_coef * aggregated KL(pi || pi_ref) (--use-kl-loss, --kl-loss-type, --use-unbiased-kl)
//
// Log-ratios go through bounded_log_ratio (log_ratio.h) before exp, so extreme inputs give finite
// losses and gradients. Everything is computed in at least fp32.
//
// Metrics (shares of step-level means unless noted, see loss_metrics.h): loss, pg_loss,
// pg_clipfrac, ppo_kl (mean of log pi_old - log pi; per sequence for gspo), entropy_loss (when
// entropy is given), kl_loss (--use-kl-loss), opsm_clipfrac (--use-opsm), and with rollout
// log-probs the mismatch metrics of mismatch_correction.h.
#pragma once

#include <ATen/ATen.h>

#include <functional>

#include "algorithms/advantages.h"
#include "algorithms/kl.h"
#include "algorithms/loss_aggregation.h"
#include "algorithms/loss_metrics.h"
#include "algorithms/mismatch_correction.h"
#include "algorithms/packed_sequences.h"
#include "core/option_fields.h"

namespace ooze::algorithms {

enum class PolicyLossKind { kPpoClip, kGspo, kCispo };

// gspo -> kGspo, cispo -> kCispo, every other estimator -> kPpoClip (as Slime).
PolicyLossKind policy_loss_kind_for(AdvantageEstimator estimator);

struct PolicyLossOptions {
  PolicyLossKind kind = PolicyLossKind::kPpoClip;  // from --advantage-estimator
  double eps_clip = 0.2;     // --eps-clip: lower bound 1 - eps_clip of the ratio
  double eps_clip_high = 0;  // --eps-clip-high: upper bound 1 + eps_clip_high; 0: eps_clip
  double eps_clip_c = 0;     // --eps-clip-c: dual-clip bound (> 1) for A < 0; 0 turns it off
  double entropy_coef = 0;   // --entropy-coef
  bool use_kl_loss = false;  // --use-kl-loss
  double kl_loss_coef = 0;   // --kl-loss-coef
  KlEstimator kl_loss_type = KlEstimator::kK1;  // --kl-loss-type
  bool use_unbiased_kl = false;                 // --use-unbiased-kl
  MismatchCorrectionOptions mismatch;           // --use-tis, --tis-clip, ...
  bool use_opsm = false;                        // --use-opsm
  double opsm_delta = 1e-4;                     // --opsm-delta

  // The ratio's upper bound is 1 + clip_high().
  double clip_high() const { return eps_clip_high == 0 ? eps_clip : eps_clip_high; }

  // The flags above (the kind is AlgorithmOptions' to set from the estimator).
  static const OptionFields<PolicyLossOptions>& fields();
  // Throws ConfigError when eps_clip_c is in (0, 1] or the TIS bounds are not ordered.
  void validate() const;

  // The trainer's ranks receive the options with their actor calls.
  template <class A>
  void save(A& ar) const {
    save_options(ar, *this);
  }
  template <class A>
  void load(A& ar) {
    load_options(ar, *this);
  }
};

// One packed micro-batch (packed_sequences.h). Every tensor is [T] except cu_seqlens.
struct PolicyLossInputs {
  at::Tensor cu_seqlens;     // int32 [B + 1]
  at::Tensor loss_mask;      // 1 on response tokens that count
  at::Tensor log_probs;      // current policy; carries the gradient
  at::Tensor old_log_probs;  // the policy that the advantages refer to
  at::Tensor advantages;
  at::Tensor ref_log_probs;      // with use_kl_loss
  at::Tensor rollout_log_probs;  // with use_tis or get_mismatch_metrics
  at::Tensor entropy;  // optional: per-token entropy of the current policy (with its gradient);
                       // required when entropy_coef != 0
  // Optional [B]: each sample's response tokens over all CP ranks (loss_aggregation.h).
  at::Tensor sequence_token_counts;
  // Optional: reduces the per-token surrogate [T] to pg_loss in place of the aggregation's
  // weights (a user's reducer, --custom-pg-loss-reducer-function-path); its result must be this
  // micro-batch's share of the step's pg_loss. It gets the loss mask pg_loss counts (a custom TIS
  // function's). The other terms and metrics keep the weights.
  std::function<at::Tensor(const at::Tensor& per_token, const at::Tensor& loss_mask)>
      pg_loss_reducer;
  // Required with use_tis and a custom_tis_function_path, which it runs (the trainer makes it):
  // the correction in place of rollout_importance_weights and its metrics. Needs whole samples
  // (no sequence_token_counts): pg_loss's counts are rebuilt from the mask it returns.
  CustomTis custom_tis;
};

// Throws ooze::Error on a missing or misshapen input the options need, and ConfigError on
// invalid options (validate()).
LossOutput policy_loss(const PolicyLossInputs& inputs, const PolicyLossOptions& options,
                       const LossScale& scale);

// --- Per-token surrogates (exposed for tests and custom losses) ---

struct PerTokenPolicyLoss {
  at::Tensor loss;     // [T]
  at::Tensor clipped;  // [T] 1 where clipping changed the token's loss (or CISPO's weight)
};

// PPO clip with dual clip, from the log-ratio log pi - log pi_old.
PerTokenPolicyLoss ppo_clip_loss(const at::Tensor& log_ratio, const at::Tensor& advantages,
                                 double eps_clip, double eps_clip_high, double eps_clip_c);
// [T]: every token gets its sample's mean of (log pi - log pi_old) over counted tokens.
at::Tensor gspo_sequence_log_ratio(const at::Tensor& log_probs, const at::Tensor& old_log_probs,
                                   const at::Tensor& loss_mask, const PackedSequences& sequences);
PerTokenPolicyLoss cispo_loss(const at::Tensor& log_probs, const at::Tensor& old_log_probs,
                              const at::Tensor& advantages, double eps_clip, double eps_clip_high);

}  // namespace ooze::algorithms
