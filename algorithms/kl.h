// Per-token estimators of KL(pi || pi_base) from log-probs of the sampled tokens (Schulman,
// "Approximating KL divergence"), as Slime and verl compute them. With x = log pi - log pi_base:
//   k1          x
//   k2          x^2 / 2
//   k3          exp(-x) - 1 + x            (non-negative, unbiased)
//   low_var_kl  k3 clamped to [-10, 10]    (after the importance ratio, as in Slime)
// Computed in at least fp32. k3 and low_var_kl use bounded_log_ratio(x) (log_ratio.h: x clamped
// to [-20, 20] in value), so that a diverged token cannot overflow to Inf or give NaN gradients.
//
// Unbiased KL (--use-unbiased-kl, DeepSeek-V3.2): the estimate is multiplied by the importance
// ratio pi_theta / pi_old, which keeps its gradient, so that the expectation over samples drawn
// from pi_old is the KL of the current policy.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace ooze::algorithms {

enum class KlEstimator { kK1, kK2, kK3, kLowVarKl };

// "k1", "k2", "k3", "low_var_kl": the --kl-loss-type spellings.
std::string kl_estimator_name(KlEstimator estimator);

// [T] estimates. `importance_ratio` [T], optional: multiplies the estimate (unbiased KL).
// Differentiable in every input.
at::Tensor approx_kl(const at::Tensor& log_probs, const at::Tensor& base_log_probs,
                     KlEstimator estimator, const at::Tensor& importance_ratio = at::Tensor());

}  // namespace ooze::algorithms
