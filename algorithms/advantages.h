// Advantage estimators (--advantage-estimator), computed per sample before packing.
//
// Inputs are the step's N = n_prompts * n_samples_per_prompt samples, the samples of one prompt
// consecutive (a group): one scalar reward each, and per-sample tensors over the sample's R_i
// response tokens (entry r refers to the r-th response token). Outputs are per-sample [R_i].
//
//   grpo, gspo, cispo  reward minus its group's mean, divided by the group's unbiased std + 1e-6
//                      (--disable-grpo-std-normalization: no division, Dr.GRPO), on every token
//   rloo               reward minus the mean of the other samples of its group
//   reinforce_plus_plus
//                      token rewards -kl_coef * mask_t * KL_t (no penalty on tokens outside the
//                      loss mask), plus the reward on the last counted response token (mask 1);
//                      advantage = discounted return sum_k gamma^(k-t) r_k
//   reinforce_plus_plus_baseline
//                      reward minus its group's mean, minus kl_coef * KL_t on counted tokens
//   ppo                GAE(gamma, lambd) over the critic's values with the token rewards of
//                      reinforce_plus_plus; returns = advantages + values
//
// A group of one sample, or of equal rewards, has no spread: its grpo and rloo advantages are 0.
// The reinforce_plus_plus estimators are then whitened over the whole step's tokens (the
// REINFORCE++ recipe); --normalize-advantages whitens the others too. Whitening needs statistics
// over all DP ranks, so it is a separate step (advantage_whitening.h): see whitens_advantages().
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/option_fields.h"

namespace ooze::algorithms {

enum class AdvantageEstimator {
  kGrpo,
  kGspo,
  kCispo,
  kRloo,
  kReinforcePlusPlus,
  kReinforcePlusPlusBaseline,
  kPpo,
};

// "grpo", "gspo", "cispo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo":
// the --advantage-estimator spellings.
std::string advantage_estimator_name(AdvantageEstimator estimator);

struct AdvantageOptions {
  AdvantageEstimator estimator = AdvantageEstimator::kGrpo;  // --advantage-estimator
  // Keep the group mean (grpo, gspo, cispo, reinforce_plus_plus_baseline subtract it otherwise).
  bool disable_rewards_normalization = false;
  // Do not divide by the group's std (grpo, gspo, cispo): Dr.GRPO.
  bool disable_grpo_std_normalization = false;
  bool normalize_advantages = false;  // --normalize-advantages
  double kl_coef = 0;                 // --kl-coef: KL penalty in the token rewards
  double gamma = 1.0;                 // --gamma: discount
  double lambd = 1.0;                 // --lambd: GAE lambda

  // The flags above, Slime's names.
  static const OptionFields<AdvantageOptions>& fields();

  // True when the advantages must be whitened over the step (all DP ranks) after
  // compute_advantages: always for the reinforce_plus_plus estimators, else with
  // normalize_advantages.
  bool whitens_advantages() const;
};

struct AdvantageInputs {
  at::Tensor rewards;      // [N] floating: the scalar reward of each sample
  int64_t group_size = 1;  // --n-samples-per-prompt: consecutive samples of one prompt
  // N x [R_i] floating: 1 on response tokens that count, 0 on the others (e.g. tool output).
  std::vector<at::Tensor> response_masks;
  // N x [R_i]: per-token KL of the old policy from the reference (approx_kl with --kl-loss-type),
  // needed by ppo and the reinforce_plus_plus estimators when kl_coef != 0.
  std::vector<at::Tensor> kl;
  // N x [R_i]: the critic's values of the response tokens; ppo only.
  std::vector<at::Tensor> values;
};

struct AdvantageResult {
  std::vector<at::Tensor> advantages;  // N x [R_i], not yet whitened
  // N x [R_i]: the critic's targets for ppo (advantages + values); for the other estimators the
  // same values as the advantages.
  std::vector<at::Tensor> returns;
};

// Throws ooze::Error on inconsistent inputs (N not a multiple of group_size, a per-sample tensor
// missing or of another length than its mask, values missing for ppo, KL missing when kl_coef !=
// 0). Outputs are on the masks' device, in the rewards' dtype upcast to at least fp32.
AdvantageResult compute_advantages(const AdvantageInputs& inputs, const AdvantageOptions& options);

// --- Building blocks (exposed for tests and custom estimators) ---

// [N]: each reward minus its group's mean, divided by (unbiased std + epsilon) when
// `divide_by_std`; a group of one sample has std 0. Computed in float64.
at::Tensor group_normalized_rewards(const at::Tensor& rewards, int64_t group_size,
                                    bool divide_by_std, double epsilon = 1e-6);
// [N]: each reward minus the mean of the other rewards of its group (0 for a group of one).
at::Tensor leave_one_out_rewards(const at::Tensor& rewards, int64_t group_size);

// N x [R_i]: -kl_coef * mask_i * kl_i (zeros when `kl` is empty), plus rewards[i] on the last
// token whose mask is 1 (nowhere when there is none). Tokens whose mask is 0 (tool output inside
// a multi-turn sample, padding after the last counted token) carry exactly 0 besides: the policy
// did not produce them, so their KL is no penalty on it, and it must not leak into the returns of
// the tokens before them. The reward lands on the last counted token, not the last token, so
// masked tokens after it carry nothing at all.
std::vector<at::Tensor> kl_penalized_token_rewards(const at::Tensor& rewards,
                                                   const std::vector<at::Tensor>& kl,
                                                   const std::vector<at::Tensor>& response_masks,
                                                   double kl_coef);

// [N, L]: y_t = sum_{k >= t} discount^(k - t) x_k along dim 1, by chunks of `chunk_size` tokens:
// one batched matmul inside the chunks, then a short recurrence across chunks (N x L / chunk
// steps instead of L sequential ones). Rows must be zero-padded past their length.
at::Tensor reverse_discounted_sum(const at::Tensor& x, double discount, int64_t chunk_size = 64);

struct GaeResult {
  std::vector<at::Tensor> advantages;  // N x [R_i]
  std::vector<at::Tensor> returns;     // N x [R_i]: advantages + values
};

// Generalised advantage estimation, delta_t = r_t + gamma * V_{t+1} - V_t (V_{R} = 0),
// A_t = delta_t + gamma * lambd * A_{t+1}, in two forms that agree to rounding:
// the plain reverse loop, on the host in float64 (the faster one on a CPU) ...
GaeResult gae_loop(const std::vector<at::Tensor>& token_rewards,
                   const std::vector<at::Tensor>& values, double gamma, double lambd);
// ... and the vectorised form for accelerators (reverse_discounted_sum over padded rows).
GaeResult gae_chunked(const std::vector<at::Tensor>& token_rewards,
                      const std::vector<at::Tensor>& values, double gamma, double lambd);
// gae_loop for CPU tensors, gae_chunked otherwise. Outputs have the values' dtype and device.
GaeResult gae(const std::vector<at::Tensor>& token_rewards, const std::vector<at::Tensor>& values,
              double gamma, double lambd);

}  // namespace ooze::algorithms
