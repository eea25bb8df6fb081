// Corrections for the mismatch between the inference engine and the trainer: the rollout was
// sampled with the engine's probabilities pi_rollout, while the loss uses the trainer's pi_old
// (https://fengyao.notion.site/off-policy-rl). The importance ratio pi_old / pi_rollout
//   token level      exp(old_t - rollout_t)
//   sequence level   exp(sum over the sample's counted tokens of (old - rollout))
//   geometric level  exp(mean over the sample's counted tokens of (old - rollout))
// (log-ratios clamped to [-20, 20] first) then weights the policy-gradient loss of each token:
//   clip (truncated importance sampling, --use-tis):  clamp(ratio, tis_clip_low, tis_clip)
//   mask (icepop):  ratio inside [tis_clip_low, tis_clip], 0 outside (the token is dropped)
// The weights carry no gradient: pi_old and pi_rollout are fixed during the step.
//
// With --custom-tis-function-path a user's function (Slime's tis_func) takes the place of all
// of this: it reweights the per-token loss itself, may reject tokens, and reports its own
// metrics (CustomTis below; trainer/python_loss.h runs it).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/loss_metrics.h"
#include "algorithms/packed_sequences.h"
#include "core/option_fields.h"

namespace ooze::algorithms {

enum class TisLevel { kToken, kSequence, kGeometric };
enum class TisMode { kClip, kMask };

// "token", "sequence", "geometric" / "clip", "mask": the --tis-level / --tis-mode spellings.
std::string tis_level_name(TisLevel level);
std::string tis_mode_name(TisMode mode);

struct MismatchCorrectionOptions {
  bool use_tis = false;               // --use-tis: weight the policy-gradient loss
  double tis_clip = 2.0;              // --tis-clip: upper bound of the ratio
  double tis_clip_low = 0.0;          // --tis-clip-low: lower bound
  TisLevel level = TisLevel::kToken;  // --tis-level
  TisMode mode = TisMode::kClip;      // --tis-mode
  bool get_mismatch_metrics = false;  // --get-mismatch-metrics: metrics without weighting
  // --custom-tis-function-path: with use_tis, the user's function in place of the weights here.
  std::string custom_tis_function_path;

  // --use-tis, --tis-clip, --tis-clip-low, --tis-level, --tis-mode, --get-mismatch-metrics,
  // --custom-tis-function-path.
  static const OptionFields<MismatchCorrectionOptions>& fields();
  // Throws ConfigError unless tis_clip_low < tis_clip, and when a custom TIS function is given
  // without use_tis.
  void validate() const;
  // Whether the loss needs rollout log-probs.
  bool needs_rollout_log_probs() const { return use_tis || get_mismatch_metrics; }
  // Whether the user's TIS function replaces the built-in one.
  bool uses_custom_tis() const { return use_tis && !custom_tis_function_path.empty(); }
};

struct RolloutImportanceWeights {
  at::Tensor ratio;      // [T] pi_old / pi_rollout at the configured level, before correction
  at::Tensor weights;    // [T] the factor on each token's policy-gradient loss
  at::Tensor corrected;  // [T] 1 where the ratio was outside [tis_clip_low, tis_clip], else 0
};

// What a custom TIS function makes of a micro-batch, every tensor [T] over its packed tokens.
struct CustomTisResult {
  at::Tensor per_token;  // the corrected per-token policy-gradient loss, with its gradient
  // The tokens pg_loss counts: a token the function rejects leaves pg_loss's denominator too
  // (loss_token_weights is rebuilt from this mask for pg_loss, as Slime rebuilds
  // sum_of_sample_mean).
  at::Tensor loss_mask;
  // One value per token each, averaged as the tis metrics are (by the step's loss masks).
  std::vector<std::pair<std::string, at::Tensor>> metrics;
};
// (per-token loss, old_log_probs, rollout_log_probs, loss_mask) -> the correction.
using CustomTis = std::function<CustomTisResult(
    const at::Tensor& per_token_loss, const at::Tensor& old_log_probs,
    const at::Tensor& rollout_log_probs, const at::Tensor& loss_mask)>;

// All outputs detached, in the compute dtype of old_log_probs.
RolloutImportanceWeights rollout_importance_weights(const at::Tensor& old_log_probs,
                                                    const at::Tensor& rollout_log_probs,
                                                    const at::Tensor& loss_mask,
                                                    const PackedSequences& sequences,
                                                    const MismatchCorrectionOptions& options);

// Adds the mismatch metrics, means weighted by `metric_weights` (loss_token_weights):
//   train_rollout_logprob_abs_diff (mean) and _max of |old - rollout|,
//   train_rollout_k3_kl: mean of exp(d) - 1 - d with d = old - rollout,
//   tis (mean ratio), tis_abs (mean |ratio - 1|), tis_min and tis_max over counted tokens (+inf
//   and 0 when none counts, the identities of their reductions),
//   tis_clipfrac (mean of `corrected`: the fraction clipped, or masked in mask mode).
void add_mismatch_metrics(PendingMetrics& metrics, const RolloutImportanceWeights& weights,
                          const at::Tensor& old_log_probs, const at::Tensor& rollout_log_probs,
                          const at::Tensor& loss_mask, const at::Tensor& metric_weights);

}  // namespace ooze::algorithms
